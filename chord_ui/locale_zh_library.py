"""Simplified Chinese for the Library page (search, watched folders, alerts). Merged into
``chord_ui.i18n.ZH``; the same rules as the other locale files (placeholders kept, checked by
``tests/app/test_i18n.py``)."""

from __future__ import annotations

ZH_LIBRARY: dict[str, str] = {
    "Library": "资料库",
    "Every clip analysed so far, searchable: descriptions, chapters, grounding targets, "
    "statements, file names.": "检索所有已分析过的视频：描述、章节、定位目标、陈述和文件名。",
    "Search the library": "搜索资料库",
    "Words to find, e.g. a person climbs the fence": "要查找的词，例如：有人翻越围栏",
    "Folder": "文件夹", "Only clips in this folder or below it":
        "只看此文件夹及其子文件夹中的视频",
    "From": "起始日期", "To": "截止日期", "Task": "任务", "Any task": "任意任务",
    "describe": "描述", "ground": "定位", "entail": "陈述检查", "chapters": "章节",
    "description": "描述", "chapter": "章节", "target": "目标", "statement": "陈述",
    "{n} hits for {q}": "“{q}”共 {n} 条结果",
    "{n} hits for {q} (no passage has every word: passages with any of them)":
        "“{q}”共 {n} 条结果（没有同时包含所有词的段落：显示包含任一词的段落）",
    "No hits. Only analysed clips are searched: run Analyze, Batch or a watched folder first.":
        "没有结果。只会搜索已分析过的视频：请先在“分析”“批量”或监视文件夹中运行。",
    "Play here": "在此播放",
    "not found in the clip": "视频中未找到", "verdict {v}": "结论 {v}",
    "The clip is gone or outside the media roots: no thumbnail or playback.":
        "视频已不存在或不在媒体根目录下：无法显示缩略图或播放。",
    "Rebuild index": "重建索引",
    "Indexed {n} passages of {clips} clips.": "已索引 {clips} 个视频的 {n} 个段落。",
    "Index: {n} passages of {clips} clips": "索引：{clips} 个视频的 {n} 个段落",
    "Alerts": "警报",
    "No alerts yet. Watched folders with statements (CHORD_WATCH_CHECKS, or "
    "`watch --statement`) raise them here.":
        "还没有警报。带有陈述的监视文件夹（CHORD_WATCH_CHECKS 或 `watch --statement`）会在这里发出警报。",
    "**{name}** · {start}–{end} s · P = {p} · {statement}":
        "**{name}** · {start}–{end} 秒 · 概率 {p} · {statement}",
    "Evidence frames at {times} s": "证据帧：{times} 秒",
    "Hook: {outcome} in {s} s": "钩子：{outcome}，用时 {s} 秒",
    "Alert: {statement} in {name} at {start} s": "警报：{name} 在 {start} 秒处：{statement}",
}
