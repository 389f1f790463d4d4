"""The interface language (issue 16): every text the pages translate has its Chinese, with the
same placeholders; plain-words helpers; the player's data. Pure functions, no server."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from chord_ui.i18n import ZH, browser_lang, translate
from chord_ui.wording import grouped_notes, plan_words, queue_position

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "chord_ui").glob("*.py"), *(ROOT / "views").glob("*.py"),
                  ROOT / "app.py"])


def _literals() -> dict[str, str]:
    """English texts passed to t()/translate() as literals, with the file they are in."""
    found: dict[str, str] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            name = getattr(func, "id", getattr(func, "attr", None))
            if isinstance(node, ast.Call) and name in ("t", "translate") and node.args:
                arg = node.args[0]
                for a in (arg.body, arg.orelse) if isinstance(arg, ast.IfExp) else (arg,):
                    if isinstance(a, ast.Constant) and isinstance(a.value, str):
                        found.setdefault(a.value, path.name)
    return found


def test_every_translated_text_has_chinese() -> None:
    missing = {text: where for text, where in _literals().items() if text not in ZH}
    assert not missing, missing


@pytest.mark.parametrize("text", sorted(ZH), ids=lambda s: s[:30])
def test_placeholders_match(text: str) -> None:
    fields = re.compile(r"\{(\w*)\}")
    assert sorted(fields.findall(text)) == sorted(fields.findall(ZH[text]))
    assert not re.search(r"[A-Za-z]{4,}", re.sub(r"\{\w*\}|\*\*|`[^`]*`|CHORD_\w+|Qwen\S*|"
                                                  r"Hugging Face|Hub|PyAV|H\.264|JSON|CSV|MP4|"
                                                  r"config\.json|safetensors|fps|GiB|GPU|NVIDIA|"
                                                  r"Chord|NVML|COCO|YOLO|chord batch|chord\.result/v1|summary\.json|"
                                                  r"mp4|avi|mov|mkv|webm", "",
                                                  ZH[text])), ZH[text]


@pytest.mark.parametrize(("locale", "lang"), [("zh-CN", "zh"), ("zh-Hans", "zh"), ("zh", "zh"),
                                              ("en-US", "en"), ("de-DE", "en"), (None, "en")])
def test_browser_language(locale: str | None, lang: str) -> None:
    assert browser_lang(locale) == lang


def test_translate_fills_fields_and_falls_back() -> None:
    assert translate("Elapsed {elapsed}", "zh", elapsed="3.0 s") == "已用 3.0 s"
    assert translate("Elapsed {elapsed}", "en", elapsed="3.0 s") == "Elapsed 3.0 s"
    assert translate("a text nobody translated", "zh") == "a text nobody translated"


def _plan(n: int, wh: tuple[int, int], fps: float = 2.0) -> SimpleNamespace:
    return SimpleNamespace(num_frames=n, input_wh=wh, fps=fps, visual_tokens=n * 100)


@pytest.mark.parametrize(("plan", "duration", "words"), [
    (_plan(60, (448, 252)), 30.0, "60 pictures from across the clip (about 2 a second), in low"),
    (_plan(24, (644, 364)), 12.0, "(about 2 a second), in medium detail"),
    (_plan(10, (1280, 720)), 100.0, "(about one every 10 seconds), in high detail"),
    (_plan(1, (640, 360)), 0.0, "one picture, in medium detail"),
], ids=["low", "medium", "sparse-high", "image"])
def test_plan_in_words(plan, duration: float, words: str) -> None:  # noqa: ANN001
    text = plan_words(plan, duration, "en")
    assert words in text and "token" not in text


def test_queue_position() -> None:
    def st(job: str, state: str, at: float) -> SimpleNamespace:
        return SimpleNamespace(job_id=job, state=SimpleNamespace(value=state), submitted_at=at)

    jobs = [st("a", "running", 0), st("b", "queued", 2), st("c", "queued", 1)]
    assert [queue_position(j, jobs) for j in ("a", "b", "c")] == [None, 2, 1]


def test_notes_grouped() -> None:
    notes = [f"frame {t:.1f} s: the answer was cut off; kept 0 item(s)" for t in (0.5, 1.0)]
    assert grouped_notes(notes + ["other"]) == [(notes[0], 2), ("other", 1)]


def test_player_data_is_plain_json(app_clip: Path) -> None:
    """Labels and file names travel as JSON strings (set with textContent in the page)."""
    import json

    from chord_core.analysis.request import plan
    from chord_core.config import SamplingConfig
    from chord_core.types import Detection, ModelInfo, Result, Segment, Timing, Track
    from chord_ui.player import player_data

    info, sp = plan(str(app_clip), "ground", SamplingConfig())
    evil = '<img src=x onerror="alert(1)">'
    dets = (Detection(sp.timestamps_s[0], sp.frame_indices[0], (0.1, 0.1, 0.3, 0.3),
                      (1, 1, 3, 3), evil, 1),)
    result = Result("ground", evil, info, sp, ModelInfo("m", "none"), Timing(), detections=dets,
                    tracks=(Track(1, evil, 0.0, 0.0, 1),), segments=(Segment(1, 0.0, 0.5, evil),))
    data = player_data(result, "/media/x.mp4", "job-1")
    assert json.loads(json.dumps(data)) == data
    assert data["rows"][0]["name"] == f"#1 {evil}" and data["rows"][0]["segments"] == [[0.0, 0.5]]
    assert data["detections"][0]["color"] == data["rows"][0]["color"]  # box = timeline colour
    assert data["snap_s"] == pytest.approx(0.5 / info.fps)
    js = (ROOT / "chord_ui" / "static" / "player.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js


def test_words_looked_up_at_run_time_have_chinese() -> None:
    """Texts the pages pass to t() as variables: job states, History filters, the columns of
    the History, Batch, GPUs and statement-check tables, and the verdict words."""
    from chord_core.runtime.store import STATES
    from chord_ui import batch_jobs, entail_view, gpu_view, history_table, history_view
    from chord_ui.formatting import VERDICT_WORDS

    row = {"job_id": "j", "submitted_at": 0.0, "started_at": None, "finished_at": None,
           "state": "queued", "task": "ground", "query": "", "model": "", "spec": {},
           "video_name": "c.mp4"}
    frame = SimpleNamespace(t_s=0.0, frame_index=0, label="neutral", entailment=0.1,
                            neutral=0.8, contradiction=0.1)
    result = SimpleNamespace(entailment=SimpleNamespace(frames=[frame]))
    gpu = SimpleNamespace(index=0, name="H200", cuda_ordinal=0, utilization_pct=1.0,
                          memory_pct=1.0, memory_used_mib=1.0, memory_total_mib=2.0,
                          temperature_c=30.0, power_w=1.0, power_limit_w=2.0, processes=(),
                          job="")
    words = [*history_view.FILTERS.values(), *STATES, "skipped", *VERDICT_WORDS,
             *VERDICT_WORDS.values(), *set(history_table.table_rows([row], None)[0]) - {"thumb"},
             *history_view.SORTS.values(), "search", "batch",  # History's task filter
             *entail_view.moments_rows(result)[0], *gpu_view.gpu_rows([gpu], {})[0],
             *gpu_view.worker_table_rows([{"worker": "cpu0", "state": "ready"}], None)[0]]
    clip_state = SimpleNamespace(clip=SimpleNamespace(name="c.mp4"), state="running",
                                 worker=None, stage="", progress=0.0, elapsed_s=0.0)
    words += [*batch_jobs.table_rows([clip_state])[0]]
    # shown as they are (GPU, CUDA, pid), or under a label of their own (the progress bars)
    shown_otherwise = {"GPU", "CUDA", "pid", "memory %", "utilisation %"}
    missing = sorted({w for w in words if w not in ZH} - shown_otherwise)
    assert not missing, missing


@pytest.mark.parametrize(("reason", "zh"), [
    ("nvidia-ml-py not installed (pip install nvidia-ml-py)",
     "未安装 nvidia-ml-py（pip install nvidia-ml-py）"),
    ("no NVIDIA GPU found", "未找到 NVIDIA GPU"),
    ("NVML could not initialise: Driver Not Loaded (no NVIDIA driver?)",
     "NVML 无法初始化：Driver Not Loaded（没有 NVIDIA 驱动？）"),
    ("something else entirely", "something else entirely"),
], ids=["no-pynvml", "no-gpu", "no-driver", "unknown-kept"])
def test_nvml_reasons_in_chinese(monkeypatch: pytest.MonkeyPatch, reason: str, zh: str) -> None:
    from chord_ui import gpu_view, i18n

    monkeypatch.setattr(i18n, "lang", lambda: "zh")
    assert gpu_view.nvml_reason(reason) == zh


def test_time_unit_and_worker_states_in_chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    from chord_ui import gpu_view, i18n
    from chord_ui.formatting import human_duration

    monkeypatch.setattr(i18n, "lang", lambda: "zh")
    assert human_duration(12.34) == "12.3 秒" and human_duration(75.2) == "1:15"
    rows = gpu_view.worker_table_rows([{"worker": "cpu0", "state": "ready", "busy_s": 3.0}],
                                      None)
    assert (rows[0]["state"], rows[0]["busy"]) == ("就绪", "3 秒")


def _fixed_hints(module: object) -> dict[str, str]:
    """Every ``hint=`` of a chord_core module's errors that is a fixed text — a literal or a
    module constant such as ``_PICK_VIDEO`` — with the line it is given on. f-string hints
    (names, paths) are matched by pattern and tested where they are made."""
    path = Path(module.__file__)  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.keyword) and node.arg == "hint"):
            continue
        value = node.value
        if isinstance(value, ast.Name):  # a module constant: its value, as the app gets it
            value = ast.Constant(getattr(module, value.id))
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found[value.value] = f"{path.name}:{node.value.lineno}"
    return found


@pytest.mark.parametrize("module_name", ["chord_core.media.video_files", "chord_core.media.roots"],
                         ids=["video_files", "roots"])
def test_every_fixed_hint_has_chinese(module_name: str) -> None:
    """The Analyze page shows these modules' hints under "解决办法": each one is said in
    Chinese (issue 39: "解决办法: pick a video file (MP4, …)" was left in English)."""
    import importlib

    from chord_ui.messages import localized

    hints = _fixed_hints(importlib.import_module(module_name))
    assert len(hints) >= 5, hints  # the walk found the hints (a broken walk finds none)
    untranslated = {hint: where for hint, where in hints.items()
                    if not re.search(r"[\u4e00-\u9fff]", localized("x", hint, "zh")[1])}
    assert not untranslated, untranslated


def test_pick_video_hint_in_chinese() -> None:
    from chord_core.media.video_files import _PICK_VIDEO
    from chord_ui.messages import localized

    assert localized("a.txt is a text file, not a video", _PICK_VIDEO, "zh") == (
        "a.txt 是文本文件，不是视频", "请选择一个视频文件（MP4、MOV、MKV、WebM、AVI）")
    assert localized("m", _PICK_VIDEO, "en") == ("m", _PICK_VIDEO)


def _lang_page() -> None:
    """A page that shows the session's language and the query of an in-app link."""
    import streamlit as st

    from chord_ui.i18n import lang, language_switch, link_params

    language_switch()
    st.text(lang())
    st.text(str(link_params(job="j1")))


@pytest.mark.parametrize(("chosen", "url", "shown"), [
    (None, "zh", "zh"),  # a shared link ?lang=zh
    ("en", "zh", "zh"),  # a link opened in a session that was English: the link says zh
    ("zh", None, "zh"),  # a page opened without ?lang= (st.switch_page, the sidebar)
    (None, None, "en"),  # nothing chosen, no browser locale in AppTest: English
], ids=["url", "url-over-earlier-choice", "session-without-url", "default"])
def test_language_from_url_is_kept_for_the_session(chosen: str | None, url: str | None,
                                                   shown: str) -> None:
    """``?lang=`` sets the session's language; a page opened without it keeps it (issue
    39: a link dropped it and the next page came up in the browser's language)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_lang_page)
    if chosen:
        at.session_state["ui_lang"] = chosen
    if url:
        at.query_params["lang"] = url
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.text[0].value == shown
    assert at.text[1].value == str({"job": "j1", "lang": shown})
    at.query_params.pop("lang", None)  # the next page is opened without ?lang=
    at.run()
    assert at.text[0].value == shown
    assert at.query_params.get("lang") == (shown if chosen or url else None)


def _link_calls() -> list[tuple[str, ast.Call]]:
    """Every call in the pages that opens another page: ``page_link``, ``switch_page`` and
    ``link_button``, with the file and line it is on."""
    calls = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            func = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(func, "attr", None) in (
                    "page_link", "switch_page", "link_button"):
                calls.append((f"{path.name}:{node.lineno}", node))
    return calls


def test_every_in_app_link_carries_the_language() -> None:
    """page_link / switch_page pass ``query_params=link_params(...)``; a link button's URL
    to a page of the app ("/?…") names ``lang=``."""
    calls = _link_calls()
    assert len(calls) >= 4, calls  # batch, history (3), library
    bare = []
    for where, call in calls:
        kw = {k.arg: k.value for k in call.keywords}
        url = call.args[1] if len(call.args) > 1 else kw.get("url")
        if getattr(call.func, "attr", "") == "link_button":
            text = ast.unparse(url) if url is not None else ""
            ok = not text.lstrip("f'\"").startswith("/") or "lang=" in text
        else:
            params = kw.get("query_params")
            ok = isinstance(params, ast.Call) and getattr(params.func, "id", "") == "link_params"
        if not ok:
            bare.append(where)
    assert not bare, bare


def _font_page() -> None:
    """A page that says whether CJK glyphs are missing, as every page of the app does."""
    from chord_ui.i18n import cjk_font_notice

    cjk_font_notice()


@pytest.mark.parametrize(("language", "fc_list", "fonts", "shown"), [
    ("zh", "/usr/bin/fc-list", "", True),  # Chinese, no CJK font: say which package
    ("zh", "/usr/bin/fc-list", "Noto Sans CJK SC\n", False),  # the glyphs are there
    ("en", "/usr/bin/fc-list", "", False),  # English needs no CJK font
    ("zh", None, "", False),  # no fontconfig: cannot tell, say nothing
], ids=["zh-no-font", "zh-font", "en-no-font", "no-fc-list"])
def test_missing_cjk_font_is_named(monkeypatch: pytest.MonkeyPatch, language: str,
                                   fc_list: str | None, fonts: str, shown: bool) -> None:
    """Issue 39: in Chinese on a machine without CJK fonts every text was boxes, with no
    word why. fc-list (the boundary) is faked; it is asked once per process."""
    import subprocess

    from streamlit.testing.v1 import AppTest

    from chord_ui import i18n

    calls: list[list[str]] = []

    def fake_run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=fonts, stderr="")

    monkeypatch.setattr(i18n.shutil, "which", lambda name: fc_list)
    monkeypatch.setattr(i18n.subprocess, "run", fake_run)
    i18n.has_cjk_font.cache_clear()
    try:
        for _ in range(2):  # a rerun asks no second time
            at = AppTest.from_function(_font_page)
            at.query_params["lang"] = language
            at.run()
            assert not at.exception, [e.value for e in at.exception]
            infos = [i.value for i in at.info]
            assert infos == ([i18n.NO_CJK_FONT] if shown else [])
        assert len(calls) == (1 if fc_list and language == "zh" else 0)
        assert all(c[1:] == [":lang=zh", "family"] for c in calls)
        if shown:
            assert "fonts-noto-cjk" in infos[0] and not re.search(r"[\u4e00-\u9fff]", infos[0])
    finally:
        i18n.has_cjk_font.cache_clear()
