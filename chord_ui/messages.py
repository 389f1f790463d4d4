"""Errors from ``chord_core`` in the interface language.

``chord_core`` speaks English (its messages go to logs, the CLI, the API and the store). The
messages a user meets most on the Analyze page are matched here by pattern and said in
Chinese when the interface is Chinese; the names and paths they quote are kept as they are.
Anything not matched is shown in English, under a translated frame ("How to fix").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import streamlit as st

from chord_ui.i18n import lang

# (English message pattern, Chinese message with the same groups)
ZH_MESSAGES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.DOTALL), z) for p, z in (
        (r"^(?P<x>.+) is not a video file under the media roots \((?P<r>.*)\)$",
         "{x} 不是媒体根目录（{r}）下的视频文件"),
        (r"^no such file in (?P<r>.+?): (?P<x>.+) \(its folder does not exist\)$",
         "{r} 中没有这个文件：{x}（它所在的文件夹不存在）"),
        (r"^no such file in (?P<r>.+?): (?P<x>.+)$", "{r} 中没有这个文件：{x}"),
        (r"^(?P<x>.+) is a text file, not a video$", "{x} 是文本文件，不是视频"),
        (r"^(?P<x>.+) is a text file \((?P<r>.*)$", "{x} 是文本文件（{r}"),
        (r"^(?P<x>.+) is (?P<w>.+), not a video$", "{x} 是 {w}，不是视频"),
        (r"^video file (?P<x>.+) is empty \(0 bytes\)$", "视频文件 {x} 是空的（0 字节）"),
        (r"^(?P<x>.+) has no video stream(?P<r>.*)$", "{x} 没有视频流{r}"),
        (r"^cannot decode (?P<x>.+) with PyAV: (?P<r>.*)$", "无法用 PyAV 解码 {x}：{r}"),
        (r"^(?P<x>.+) could not be read as a video \((?P<r>.*)\)$", "{x} 无法作为视频读取（{r}）"),
        (r"^grounding needs a target to look for$", "定位需要一个要查找的目标"),
        (r"^checking a statement needs the statement$", "检查陈述需要填写陈述"),
        (r"^could not save the upload: (?P<r>.*)$", "无法保存上传的文件：{r}"),
        (r"^could not make the example clip: (?P<r>.*)$", "无法生成示例视频：{r}"),
        (r"^the analysis failed$", "分析失败"),
        (r"^something went wrong$", "出错了"),
        # runtime.store_repair.move_aside: the app's store was damaged and started again
        (r"^the job store (?P<p>.+) could not be used \((?P<r>.*)\); it was moved to "
         r"(?P<a>.+) and a new, empty store started: earlier history and results are in that "
         r"file, not in the app$",
         "作业存储 {p} 无法使用（{r}）；它已被移到 {a}，并新建了一个空的存储："
         "之前的历史和结果在那个文件里，不在应用中"),
    ))

ZH_HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.DOTALL), z) for p, z in (
        (r"^give the path of an mp4, avi, mov, mkv or webm file inside one of these folders, "
         r"upload the clip, or set CHORD_MEDIA_ROOTS to the folders Chord may read$",
         "请给出这些文件夹之一中的 mp4、avi、mov、mkv 或 webm 文件路径，或上传该视频，"
         "或把 CHORD_MEDIA_ROOTS 设为 Chord 可以读取的文件夹"),
        (r"^did you mean (?P<names>.+)\? \(in (?P<r>.+)\)$", "您是不是要找 {names}？（在 {r} 中）"),
        (r"^check the file name; no video in (?P<r>.+) has a name close to it$",
         "请检查文件名；{r} 中没有名称相近的视频"),
        (r"^check the folder names in the path, or upload the clip$",
         "请检查路径中的文件夹名称，或上传该视频"),
        (r"^say what to find, e.g. (?P<x>.*)$", "请说明要查找什么，例如“戴红色头盔的骑车人”"),
        (r"^check free disk space and that CHORD_DATA_DIR is writable$",
         "请检查磁盘剩余空间，以及 CHORD_DATA_DIR 是否可写"),
        (r"^check that CHORD_DATA_DIR is writable$", "请检查 CHORD_DATA_DIR 是否可写"),
    )) + tuple(
    # fixed hints (chord_core.media.video_files, .roots), matched as they are written
    (re.compile(f"^{re.escape(e)}$"), z) for e, z in (
        ("pick a video file (MP4, MOV, MKV, WebM, AVI)",
         "请选择一个视频文件（MP4、MOV、MKV、WebM、AVI）"),
        ("check the path and file name (and that the file was not moved)",
         "请检查路径和文件名（以及文件是否已被移走）"),
        ("point the link at the real video file", "请让该链接指向真正的视频文件"),
        ("check the file's permissions", "请检查文件的权限"),
        ("check the path", "请检查路径"),
        ("check that the disk or share is still there", "请检查磁盘或共享文件夹是否仍然可用"),
        ("pass the path of a video file such as clip.mp4", "请给出视频文件的路径，例如 clip.mp4"),
        ("pass a regular video file; pipes and devices are never read",
         "请给出普通的视频文件；管道和设备从不读取"),
        ("the upload or copy probably failed; copy the file again",
         "上传或复制可能失败了；请重新复制该文件"),
        ("type or paste the path again without control characters",
         "请重新输入或粘贴路径，不要带控制字符"),
        ("give the full path (e.g. /home/name/Videos/clip.mp4), or ~/… for the home folder of "
         "the account Chord runs as",
         "请给出完整路径（例如 /home/name/Videos/clip.mp4），或用 ~/… 表示运行 Chord 的账户的主文件夹"),
        ("upload the clip instead, or start Chord with CHORD_MEDIA_ROOTS set to the folders it "
         "may read", "请改为上传该视频，或启动 Chord 时把 CHORD_MEDIA_ROOTS 设为它可以读取的文件夹"),
        ("give the full path of one video file (the Batch page takes folders)",
         "请给出单个视频文件的完整路径（批量页面接受文件夹）"),
        ("give a folder inside one of the media roots, upload the clips, or set "
         "CHORD_MEDIA_ROOTS to the folders Chord may read",
         "请给出某个媒体根目录中的文件夹，或上传这些视频，或把 CHORD_MEDIA_ROOTS 设为 Chord 可以读取的文件夹"),
    ))


def _match(text: str, table: tuple[tuple[re.Pattern[str], str], ...]) -> str:
    for pattern, zh in table:
        m = pattern.match(text)
        if m:
            groups = m.groupdict()
            if "names" in groups:  # close names, "a.mp4 or b.mp4": the names stay as they are
                groups["names"] = groups["names"].replace(" or ", " 或 ")
            return zh.format(**groups)
    return text


def store_notices(notices: Sequence[str]) -> None:
    """What opening the job store had to do (``Store.notices``: a damaged file moved aside,
    so History starts empty), on every page's sidebar for the server's life: a user who
    finds History empty is told why and where the old file is."""
    from chord_ui.formatting import md_escape

    for notice in notices:  # paths are shown as written (no Markdown read into them)
        st.sidebar.warning(md_escape(localized(notice, "")[0]), icon=":material/report:")


def localized(message: str, hint: str, language: str | None = None) -> tuple[str, str]:
    """(message, hint) in the interface language (English ones pass through)."""
    if (language or lang()) != "zh":
        return message, hint
    return _match(message, ZH_MESSAGES), _match(hint, ZH_HINTS) if hint else hint


# Notes of a result (chord_core's warnings) met most with any model: said in Chinese with the
# quoted model text kept as it is; a frame's note keeps its frame and time.
ZH_NOTES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.DOTALL), z) for p, z in (
        (r"^no boxes could be read from the answer: (?P<x>.*)$", "无法从回答中读出框：{x}"),
        (r"^no time span found in the answer (?P<x>.*)$", "回答中没有找到时间段 {x}"),
        (r"^dropped span (?P<x>.+?): (?P<r>.*)$", "已丢弃时间段 {x}：{r}"),
        (r"^(?P<n>\d+) planned frame\(s\) could not be decoded(?P<r>.*)$",
         "{n} 个计划中的帧无法解码{r}"),
        (r"^the answer is cut off; dropped the unfinished span (?P<x>.*)$",
         "回答被截断；已丢弃未完成的时间段 {x}"),
    ))
_FRAME_NOTE = re.compile(r"^frame (?P<n>\d+) \(t=(?P<t>[\d.]+) s\): (?P<rest>.*)$", re.DOTALL)


def localized_note(note: str, language: str | None = None) -> str:
    """A result's note in the interface language (an unknown one stays English)."""
    if (language or lang()) != "zh":
        return note
    m = _FRAME_NOTE.match(note)
    if m:
        return f"第 {m['n']} 帧（t={m['t']} 秒）：{_match(m['rest'], ZH_NOTES)}"
    return _match(note, ZH_NOTES)

