"""Prompts of the map-reduce over a long clip, and the tolerant reading of the answers.

Map: each chunk is described on its own frames (:func:`chunk_prompt`). Reduce: a chapter's
chunk notes become a title and a summary (:func:`chapter_prompt`), and the chapters become
the overall summary (:func:`overall_prompt`). Every prompt fits the engine's query limit
(``MAX_QUERY_CHARS``): notes are shortened evenly to fit, never dropped.

:func:`parse_title_summary` never raises and never drops silently: an answer without the
asked-for JSON still gives a title (its first words) and a summary (the answer), with a
warning that says so.
"""

from __future__ import annotations

import json
import re
from typing import Sequence

from chord_core.config import MAX_QUERY_CHARS

TITLE_WORDS = 8
MIN_NOTE_CHARS = 40


def clock(t_s: float) -> str:
    """h:mm:ss (or m:ss under an hour), whole seconds, for prompts and Markdown."""
    s = int(max(0.0, t_s))
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def chunk_prompt(start_s: float, end_s: float) -> str:
    return (f"These frames are the part from {clock(start_s)} to {clock(end_s)} of a longer "
            "video. Describe what happens in it in two or three sentences: who or what is "
            "seen, what they do, where.")


def _fit(head: str, notes: Sequence[tuple[str, str]], tail: str) -> str:
    """``head`` + one line per (label, note) + ``tail``, notes cut evenly to fit the limit."""
    fixed = len(head) + len(tail) + sum(len(label) + 4 for label, _ in notes) + 2
    room = max(MIN_NOTE_CHARS, (MAX_QUERY_CHARS - fixed) // max(1, len(notes)))
    lines = []
    for label, note in notes:
        text = " ".join(note.split())
        if len(text) > room:
            text = text[: max(1, room - 1)].rstrip() + "…"
        lines.append(f"- {label}: {text}")
    prompt = head + "\n" + "\n".join(lines) + "\n" + tail
    return prompt[:MAX_QUERY_CHARS]


def notes_fit(count: int) -> bool:
    """Whether ``count`` notes fit one prompt at MIN_NOTE_CHARS each or more."""
    return count * (MIN_NOTE_CHARS + 24) + 400 <= MAX_QUERY_CHARS


def chapter_prompt(start_s: float, end_s: float,
                   notes: Sequence[tuple[float, float, str]]) -> str:
    head = (f"Notes on consecutive parts of one chapter of a video ({clock(start_s)}–"
            f"{clock(end_s)}); the frames are from this chapter:")
    tail = ('Answer with JSON only: {"title": "<at most eight words>", "summary": "<two or '
            'three sentences>"}')
    return _fit(head, [(f"{clock(a)}–{clock(b)}", t) for a, b, t in notes], tail)


def overall_prompt(notes: Sequence[tuple[float, float, str]]) -> str:
    head = "Chapters of one video, in order; the frames are spread over the whole video:"
    tail = "Summarise the whole video in three to five sentences."
    return _fit(head, [(f"{clock(a)}–{clock(b)}", t) for a, b, t in notes], tail)


def _first_words(text: str, n: int = TITLE_WORDS) -> str:
    sentence = re.split(r"(?<=[.!?])\s", " ".join(text.split()), maxsplit=1)[0]
    words = sentence.split()
    return " ".join(words[:n]).strip(" .,:;") or "Untitled"


def _json_object(text: str) -> dict | None:
    """The first JSON object in ``text`` (in a code fence or not), or None."""
    cleaned = re.sub(r"```(?:json)?", "", text)
    start = cleaned.find("{")
    while start >= 0:
        depth = 0
        for k in range(start, len(cleaned)):
            depth += {"{": 1, "}": -1}.get(cleaned[k], 0)
            if depth == 0:
                try:
                    value = json.loads(cleaned[start: k + 1])
                except ValueError:
                    break
                return value if isinstance(value, dict) else None
        start = cleaned.find("{", start + 1)
    return None


def parse_title_summary(text: str, where: str) -> tuple[str, str, list[str]]:
    """(title, summary, warnings) from a reduce answer (see module docstring)."""
    obj = _json_object(text or "")
    warnings: list[str] = []
    title = summary = ""
    if obj is not None:
        title = " ".join(str(obj.get("title") or "").split())
        summary = " ".join(str(obj.get("summary") or "").split())
    if not summary:
        summary = " ".join((text or "").split())
        if obj is None:
            warnings.append(f"{where}: the answer held no JSON title/summary; the summary is "
                            "the whole answer")
    if not title:
        title = _first_words(summary)
        warnings.append(f"{where}: no title in the answer; took its first words")
    words = title.split()
    if len(words) > 2 * TITLE_WORDS:
        title = " ".join(words[: 2 * TITLE_WORDS]) + "…"
        warnings.append(f"{where}: the title was {len(words)} words long; shortened")
    return title, summary or "(no summary)", warnings
