"""Time spans from a model's answer, and the sampled frames inside them (pure; no model).

Two-pass grounding asks the model, for the whole clip at once, WHEN the target is visible
(``prompts.spans_prompt``), then grounds boxes only on the sampled frames inside those spans.
Answers come in many shapes — the JSON list asked for, often fenced or single-quoted,
``{"start_time": …}`` or ``{"time": [a, b]}`` variants, bare ``[a, b]`` pairs, or prose like
"from 0:03.5 to 0:07" / "2.0s - 4.5s" / "10秒到15秒". Qwen3-VL's video cookbook asks for events
as a dictionary keyed by time ranges (``{"00:23.00 - 00:48.00": "trim the fat …", …}``); its
keys are the spans. A single moment ("3.2s", "12:34.56s", ``{"time": 3.2}``) becomes a span of
``MOMENT_S`` centred on it, with a warning saying so: Qwen3-VL answers "when" with one moment as
often as with a range. A Thinking model's reasoning is never read (``analysis.reasoning``).
The parser takes all of them, never raises, and says what it dropped or changed (one warning
per item), like ``grounding.parse_boxes``.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings as warnings_module
from dataclasses import dataclass
from typing import Any, Sequence

from chord_core.analysis.reasoning import UNFINISHED_WARNING, split_reasoning

_START_KEYS = ("start", "start_time", "begin", "from", "start_s", "t0")
_END_KEYS = ("end", "end_time", "stop", "to", "end_s", "t1")
_PAIR_KEYS = ("time", "times", "span", "timestamp", "timestamps", "segment", "interval")
_TIME = r"\d+(?::\d{1,2}){0,2}(?:\.\d+)?"
_UNIT = r"(?:\s*(?:s\b|sec\b|secs\b|seconds?\b|秒(?:钟)?))?"  # spaces only before a unit
_RANGE = re.compile(
    rf"(?<![\d.:])({_TIME}){_UNIT}\s*(?:-|–|—|~|～|to|until|and|到|至|和)\s*({_TIME}){_UNIT}",
    re.IGNORECASE)
# one moment in prose: a clock time (m:ss, h:mm:ss) or a number with a unit ("3.2s", "5秒")
_MOMENT = re.compile(r"(?<![\d.:])(\d+(?::\d{1,2}){1,2}(?:\.\d+)?|\d+(?:\.\d+)?\s*(?:s\b|sec\b|"
                     r"secs\b|seconds?\b|秒))", re.IGNORECASE)
MOMENT_S = 1.0  # a single moment is read as this long a span, centred on it
_NONE_WORDS = re.compile(r"\b(never|not (?:visible|present|appear|shown|seen)|does not appear|"
                         r"doesn't appear|no such|none)\b", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedSpans:
    """Spans in seconds (sorted, overlaps merged), what was dropped or fixed, and whether the
    model answered that the target never shows (``[]`` or words to that effect)."""

    spans: tuple[tuple[float, float], ...]
    warnings: tuple[str, ...]
    answered_none: bool = False

    @property
    def usable(self) -> bool:
        """True when the answer decided something: spans, or an explicit "never"."""
        return bool(self.spans) or self.answered_none


def parse_time(value: Any) -> float | None:
    """Seconds from ``3.5``, ``"3.5s"``, ``"0:03.5"``, ``"01:02:03"``; None if not a time."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    m = re.fullmatch(rf"\s*({_TIME}){_UNIT}\s*", value, re.IGNORECASE)
    if not m:
        return None
    seconds = 0.0
    for part in m.group(1).split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def parse_spans(text: str, duration_s: float | None = None, *,
                thinking: bool = False) -> ParsedSpans:
    """Spans from ``text`` (JSON first, prose second), clipped to ``[0, duration_s]``.
    ``thinking``: a Thinking model, whose answer is only what follows ``</think>``."""
    split = split_reasoning(text or "", thinking=thinking)
    if split.unfinished:
        return ParsedSpans((), (UNFINISHED_WARNING,))
    text = split.answer
    warnings: list[str] = []
    raw = _json_items(text, warnings)
    pairs: list[tuple[float, float]] = []
    if raw is not None:
        for item in (sub for item in raw for sub in _expand(item)):
            pair, why = _pair_of(item)
            if pair is None:
                warnings.append(f"dropped span {_snip(item)}: {why}")
            else:
                pairs.append(pair)
    if not pairs and raw:  # JSON that held no span: the prose reader gets its turn
        pairs = _prose_pairs(text)
        if pairs:  # its items were not spans after all: one note instead of their drops
            warnings = [f"the answer's JSON held no span; read {len(pairs)} from its text"]
    elif raw is None:
        pairs = _prose_pairs(text)
    spans = _checked(_widened(pairs, warnings), duration_s, warnings)
    none = not spans and not warnings and (raw == [] or (raw is None and
                                                          bool(_NONE_WORDS.search(text))))
    if not spans and not none and text.strip():
        warnings.append(f"no time span found in the answer {_snip(text)}")
    return ParsedSpans(tuple(spans), tuple(warnings), none)


def _prose_pairs(text: str) -> list[tuple[float, float]]:
    """Ranges written in prose; failing those, single moments (each a zero-length pair),
    unless the answer says the target never shows (a duration it mentions is no moment)."""
    pairs = [(t0, t1) for t0, t1 in ((parse_time(a), parse_time(b))
                                     for a, b in _RANGE.findall(text))
             if t0 is not None and t1 is not None]
    if pairs or _NONE_WORDS.search(text):  # "in this 10 s clip it never shows": no moment
        return pairs
    moments = (parse_time(m.group(1)) for m in _MOMENT.finditer(text))
    return [(t, t) for t in moments if t is not None]


def _expand(item: Any) -> list[Any]:
    """An event dictionary keyed by time ranges (``{"00:23.00 - 00:48.00": "…", …}``) is one
    item per key; anything else is itself."""
    if isinstance(item, dict) and item and not _has_time_keys(item) and all(
            isinstance(k, str) and (_RANGE.search(k) or parse_time(k) is not None)
            for k in item):
        return list(item)
    return [item]


def _has_time_keys(item: dict) -> bool:
    keys = {str(k).strip().lower() for k in item}
    return bool(keys & set(_START_KEYS + _END_KEYS + _PAIR_KEYS))


def _widened(pairs: list[tuple[float, float]], warnings: list[str]
             ) -> list[tuple[float, float]]:
    """A zero-length pair (one moment) → a ``MOMENT_S`` span centred on it, with a warning."""
    out = []
    for start, end in pairs:
        if start == end and start >= 0:
            half = MOMENT_S / 2
            warnings.append(f"the answer gave one moment ({start:g} s), not a span: read as "
                            f"{max(0.0, start - half):g}–{start + half:g} s")
            start, end = max(0.0, start - half), start + half
        out.append((start, end))
    return out


def frames_in_spans(times_s: Sequence[float], spans: Sequence[tuple[float, float]],
                    margin_s: float) -> list[int]:
    """Positions of the sampled frames whose time lies in a span widened by ``margin_s``
    on each side; a span too short to hold a sampled frame gets its nearest frame."""
    chosen: set[int] = set()
    for start, end in spans:
        inside = [i for i, t in enumerate(times_s) if start - margin_s <= t <= end + margin_s]
        if not inside and len(times_s):
            mid = (start + end) / 2
            inside = [min(range(len(times_s)), key=lambda i: abs(times_s[i] - mid))]
        chosen.update(inside)
    return sorted(chosen)


# -- internals ------------------------------------------------------------------------------
def _snip(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "…")


def _json_items(text: str, warnings: list[str]) -> list[Any] | None:
    """The items of the first JSON-ish list in ``text``, else every complete ``{…}`` object
    (a list cut off mid-way keeps its complete items; the cut one is warned about); None
    if there is neither."""
    body = re.sub(r"```(?:json)?", " ", text)
    start = body.find("[")
    while start != -1:
        end = body.rfind("]")
        while end > start:
            value = _literal(body[start:end + 1])
            if isinstance(value, list):
                return _flatten(value)
            end = body.rfind("]", start, end)
        start = body.find("[", start + 1)
    objects = [v for v in (_literal(m) for m in re.findall(r"\{[^{}]*\}", body))
               if isinstance(v, dict)]
    tail = body[body.rfind("}") + 1:] if "}" in body else body
    if "{" in tail:
        warnings.append(f"the answer is cut off; dropped the unfinished span {_snip(tail)}")
    return objects or ([] if "{" in tail else None)


def _flatten(value: list[Any]) -> list[Any]:
    """``[a, b]`` of two times is one span; otherwise each element is an item."""
    if len(value) == 2 and all(parse_time(v) is not None for v in value):
        return [value]
    return value


def _literal(snippet: str) -> Any:
    for load in (json.loads, ast.literal_eval):
        try:
            with warnings_module.catch_warnings():  # invalid escapes in model text warn
                warnings_module.simplefilter("ignore")
                return load(snippet)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _pair_of(item: Any) -> tuple[tuple[float, float] | None, str]:
    if isinstance(item, dict):
        lowered = {str(k).strip().lower(): v for k, v in item.items()}
        start = next((lowered[k] for k in _START_KEYS if k in lowered), None)
        end = next((lowered[k] for k in _END_KEYS if k in lowered), None)
        if start is None and end is None:
            inner = next((lowered[k] for k in _PAIR_KEYS if k in lowered), None)
            return _pair_of(inner) if inner is not None else (None, "no start/end")
        start, end = parse_time(start), parse_time(end if end is not None else start)
        return ((start, end), "") if start is not None and end is not None else \
            (None, "start/end are not times")
    if isinstance(item, (list, tuple)) and len(item) == 2:
        a, b = parse_time(item[0]), parse_time(item[1])
        return ((a, b), "") if a is not None and b is not None else (None, "not two times")
    if isinstance(item, str):
        m = _RANGE.search(item)
        if m:
            a, b = parse_time(m.group(1)), parse_time(m.group(2))
            if a is not None and b is not None:
                return (a, b), ""
        t = parse_time(item)
        return ((t, t), "") if t is not None else (None, "not a time span")
    t = parse_time(item)
    return ((t, t), "") if t is not None else (None, "not a time span")


def _checked(pairs: list[tuple[float, float]], duration_s: float | None,
             warnings: list[str]) -> list[tuple[float, float]]:
    """Reversed spans swapped, spans past the end dropped, the rest clipped; merged."""
    out: list[tuple[float, float]] = []
    for start, end in pairs:
        if start < 0 or end < 0:
            warnings.append(f"dropped span {start:g}–{end:g} s: negative time")
            continue
        if end < start:
            warnings.append(f"span {start:g}–{end:g} s was reversed; read as "
                            f"{end:g}–{start:g} s")
            start, end = end, start
        if duration_s is not None and duration_s > 0:
            if start > duration_s:
                warnings.append(f"dropped span {start:g}–{end:g} s: after the clip's end "
                                f"({duration_s:g} s)")
                continue
            if end > duration_s:
                warnings.append(f"span {start:g}–{end:g} s clipped to the clip's end "
                                f"({duration_s:g} s)")
                end = duration_s
        out.append((round(start, 3), round(end, 3)))
    merged: list[tuple[float, float]] = []
    for start, end in sorted(out):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
