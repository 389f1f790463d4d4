"""Chapters written out: JSON (the document), WebVTT and SRT subtitles, a Markdown summary.

One cue per chapter, from its start to its end: the title on the first line, the summary
on the second. Cue text is cleaned for the formats: control characters removed, whitespace
folded to one line each, ``-->`` (the timing arrow) and blank lines (the cue separator) can
never appear. Times are written to the millisecond, rounded half up, and a cue never ends
before it starts. Every writer returns text; :func:`write_exports` writes files whole or not
at all (temporary file + rename).
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Iterable

from chord_core.longvideo.doc import ChaptersDoc
from chord_core.longvideo.prompts import clock

TEST_MODEL_NOTE = "test model — random weights; the text is meaningless"


def clean_line(text: str) -> str:
    """One printable line: control characters dropped, whitespace folded, no ``-->``."""
    kept = "".join(ch if unicodedata.category(ch)[0] != "C" else " " for ch in text or "")
    line = " ".join(kept.split())
    return re.sub(r"-{2,}>", "→", line).strip()


def _ms(t_s: float) -> int:
    return int(max(0.0, t_s) * 1000 + 0.5)


def _stamp(t_s: float, sep: str) -> str:
    ms = _ms(t_s)
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _cues(doc: ChaptersDoc) -> Iterable[tuple[int, float, float, str, str]]:
    for ch in doc.chapters:
        end = max(ch.end_s, ch.start_s + 0.001)
        title = clean_line(ch.title) or f"Chapter {ch.index + 1}"
        yield ch.index + 1, ch.start_s, end, title, clean_line(ch.summary)


def to_json(doc: ChaptersDoc) -> str:
    return json.dumps(doc.to_dict(), indent=2, ensure_ascii=False) + "\n"


def to_vtt(doc: ChaptersDoc) -> str:
    lines = ["WEBVTT", ""]
    if doc.test_model:
        lines[0] += " - " + TEST_MODEL_NOTE
    for n, a, b, title, summary in _cues(doc):
        lines += [f"chapter-{n}", f"{_stamp(a, '.')} --> {_stamp(b, '.')}", title]
        lines += [summary] if summary else []
        lines.append("")
    return "\n".join(lines)


def to_srt(doc: ChaptersDoc) -> str:
    blocks = []
    for n, a, b, title, summary in _cues(doc):
        text = title + (f"\n{summary}" if summary else "")
        blocks.append(f"{n}\n{_stamp(a, ',')} --> {_stamp(b, ',')}\n{text}\n")
    return "\n".join(blocks)


def _md(text: str) -> str:
    """Model text shown as text in Markdown: markup characters escaped."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>])", r"\\\1", clean_line(text))


def to_markdown(doc: ChaptersDoc) -> str:
    name = Path(str(doc.video.get("path", "video"))).name
    lines = [f"# {_md(name)}", ""]
    if doc.test_model:
        lines += [f"> {TEST_MODEL_NOTE}", ""]
    lines += [f"Duration {clock(doc.duration_s)} · {len(doc.chapters)} chapters · "
              f"model {_md(str(doc.model.get('id', '')))}", "", "## Summary", "",
              _md(doc.summary), "", "## Chapters", ""]
    for n, a, b, title, summary in _cues(doc):
        lines += [f"### {n}. {_md(title)} ({clock(a)}–{clock(b)})", "", _md(summary), ""]
    return "\n".join(lines)


WRITERS = {"json": to_json, "vtt": to_vtt, "srt": to_srt, "md": to_markdown}


def write_exports(doc: ChaptersDoc, targets: dict[str, str | Path]) -> list[Path]:
    """Write each asked-for format (``{"vtt": "out.vtt", …}``); returns the paths written."""
    from chord_core.runtime.outputs import write_atomic

    written = []
    for fmt, target in targets.items():
        path = Path(target).expanduser()
        write_atomic(path, WRITERS[fmt](doc).encode("utf-8"))
        written.append(path)
    return written
