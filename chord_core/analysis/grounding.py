"""Model text → boxes → detections: the parser and coordinate conversion.

    parse_boxes (text of one frame) ─▶ ParsedBox (normalised in the model INPUT image)
        ─▶ to_detection (+ time, frame index, original pixels)
        ─▶ chord_core.analysis.tracking (link_tracks, segments_from_tracks, BoxTimeline, …)

Parsing. Qwen2.5-VL answers ``[{"bbox_2d": [x1, y1, x2, y2], "label": "..."}]`` in absolute
pixels of the resized input image (``coords="absolute"``, divided by ``input_wh``); Qwen3-VL
answers in 0–1000 relative units (``coords="relative1000"``). Real answers come fenced,
prose-wrapped, single-quoted, truncated or wrapped in ``{"objects": [...]}``. The parser tries
strict JSON, then Python literals (single quotes, trailing commas), then salvages the complete
objects of a cut-off answer, then a ``"bbox_2d": [...]`` pattern. It never raises on model text
and never drops silently: each dropped or repaired item gives exactly one warning, a cut-off
answer gives one, and structured-looking text that yields nothing gives one. An explicit ``[]``
or plain prose ("there is no dog") gives no boxes and no warning.

Points. A ``point_2d`` answer becomes a small box ``POINT_BOX_SIZE`` (2 % of each side) centred
on the point, ``kind="point"``. A degenerate box would be invisible when drawn and have zero IoU
when linking; the small box keeps the exact centre and ``kind`` records where it came from.

Linking, segments, summaries and interpolation live in :mod:`chord_core.analysis.tracking`.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from chord_core.analysis.tracking import (
    Box,
)
from chord_core.families import COORD_MODES
from chord_core.types import Detection

__all__ = ["POINT_BOX_SIZE", "ParseResult", "ParsedBox", "denormalise",
           "normalise_px", "parse_boxes", "to_detection"]

log = logging.getLogger(__name__)

POINT_BOX_SIZE = 0.02
_BOX_KEYS = ("bbox_2d", "bbox", "box")
_POINT_KEYS = ("point_2d", "point")
_LABEL_KEYS = ("label", "name", "object", "category")
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_STRUCTURED = re.compile(r"\{|\[\s*[-+\d.]|bbox|point_2d", re.I)
_KEYED = re.compile(r"[\"']?(bbox_2d|bbox|point_2d)[\"']?\s*[:=]\s*\[([^\[\]]*)\]", re.I)
_LABEL_RE = re.compile(r"[\"']?label[\"']?\s*[:=]\s*[\"']?([^\"',}\]]*)", re.I)
_FAIL = object()


@dataclass(frozen=True)
class ParsedBox:
    """One box read from model text: ``bbox`` normalised [x1, y1, x2, y2] of the INPUT image."""

    bbox: Box
    label: str = ""
    kind: Literal["box", "point"] = "box"


@dataclass
class ParseResult:
    """Boxes read from one answer, and one warning per dropped or repaired item."""

    boxes: list[ParsedBox] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ── parsing ──────────────────────────────────────────────────────────────────────────────────

def parse_boxes(text: str, input_wh: tuple[int, int], *, coords: str = "absolute",
                default_label: str = "") -> ParseResult:
    """Read every box/point in one model answer. Never raises on ``text``.

    ``input_wh`` is the size of the image the model saw (used in ``absolute`` mode);
    ``default_label`` names items that carry no label (usually the query).
    """
    if coords not in COORD_MODES:
        raise ValueError(f"coords must be one of {COORD_MODES}, got {coords!r}")
    if coords == "absolute" and (len(input_wh) != 2 or min(input_wh) <= 0):
        raise ValueError(f"input_wh must be two positive sizes, got {input_wh!r}")
    scale = (1000.0, 1000.0) if coords == "relative1000" else (float(input_wh[0]),
                                                                 float(input_wh[1]))
    result = ParseResult()
    items: list[tuple[Any, str]] = []
    for candidate, fenced in _candidates(text if isinstance(text, str) else ""):
        found, warns, understood = _items_from_candidate(candidate)
        items.extend(found)
        result.warnings.extend(warns)
        if not understood and (_STRUCTURED.search(candidate) or (fenced and candidate.strip())):
            result.warnings.append(f"no boxes could be read from the answer: {_snip(candidate)}")
    for n, (raw, note) in enumerate(items, start=1):
        box, warning = _to_box(raw, n, scale, default_label, note)
        if box is not None:
            result.boxes.append(box)
        if warning:
            result.warnings.append(warning)
    if result.warnings:
        log.debug("parse_boxes: %d box(es), warnings: %s", len(result.boxes), result.warnings)
    return result


def _snip(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _candidates(text: str) -> list[tuple[str, bool]]:
    """Fence bodies when there are non-empty fences, else the whole text (fences stripped)."""
    bodies = [m.group(1) for m in _FENCE.finditer(text) if m.group(1).strip()]
    if bodies:
        return [(b, True) for b in bodies]
    return [(text.replace("```", " "), False)]


def _literal(snippet: str) -> Any:
    """JSON, else a Python literal (single quotes, trailing commas), else ``_FAIL``."""
    try:
        return json.loads(snippet)
    except (ValueError, RecursionError):
        pass
    try:
        with warnings.catch_warnings():  # invalid escapes in model text warn on 3.12+
            warnings.simplefilter("ignore")
            return ast.literal_eval(snippet)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _FAIL


def _items_from_candidate(cand: str) -> tuple[list[tuple[Any, str]], list[str], bool]:
    """Items of every top-level JSON value in ``cand``; ``understood`` if any was box-shaped
    or explicitly empty, or a warning was already given."""
    items: list[tuple[Any, str]] = []
    warns: list[str] = []
    understood, pos = False, 0
    while (start := _next_open(cand, pos)) >= 0:
        pairs = _bracket_pairs(cand, start)
        end = pairs[start]
        value = _FAIL if end is None else _literal(cand[start:end])
        if value is _FAIL:
            found, lost = _salvage(cand, start, end, pairs)
            items.extend(found)
            warns.extend(lost)
            understood = understood or bool(found or lost)
            if end is None:
                break
        else:
            found_raw, boxy = _items_from_value(value)
            items.extend((raw, "") for raw in found_raw)
            understood = understood or boxy
        pos = end
    return items, warns, understood


def _next_open(text: str, pos: int) -> int:
    hits = [i for i in (text.find("[", pos), text.find("{", pos)) if i >= 0]
    return min(hits) if hits else -1


def _items_from_value(value: Any) -> tuple[list[Any], bool]:
    """Box-like items in a parsed value, and whether the value was box-shaped (or empty)."""
    if isinstance(value, dict):
        if any(k in value for k in _BOX_KEYS + _POINT_KEYS):
            return [value], True
        found, boxy = [], False
        for inner in value.values():
            if isinstance(inner, list) and (not inner or any(isinstance(v, dict) for v in inner)):
                sub, _ = _items_from_value(inner)
                found.extend(sub)
                boxy = True
        return found, boxy
    if isinstance(value, list):
        if not value:
            return [], True
        if len(value) in (4, 2) and all(_is_number(v) for v in value):
            return [value], True
        boxy = any(isinstance(v, (dict, list)) for v in value)
        return (list(value) if boxy else []), boxy
    return [], False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _salvage(text: str, start: int, end: int | None, pairs: dict[int, int | None]
             ) -> tuple[list[tuple[Any, str]], list[str]]:
    """Complete objects inside the malformed (or, ``end`` None, cut-off) value at
    ``text[start:end]``; one warning per lost item."""
    items: list[tuple[Any, str]] = []
    warns: list[str] = []
    span = text[start:end]
    opens = [i for i in sorted(pairs) if text[i] == "{" and (end is None or i < end)]
    pos, cut = 0, end is None
    for i in opens:
        close = pairs[i]
        if i < pos:
            continue
        if close is None:  # unclosed: a wrapper or the cut-off last item — look inside
            cut = True
            continue
        obj = _literal(text[i:close])
        if obj is _FAIL:
            rec = _keyed_items(text[i:close])
            items.extend(rec)
            if not rec:
                warns.append(f"dropped an unreadable item: {_snip(text[i:close])}")
        else:
            items.extend((raw, "") for raw in _items_from_value(obj)[0])
        pos = close
    if not opens:
        items.extend(_keyed_items(span))
    if cut:
        warns.append(f"the answer was cut off at the per-frame length limit; kept {len(items)} "
                     f"complete item(s), dropped the rest: {_snip(span[-40:])}")
    elif not items and not warns and (opens or _KEYED.search(span)):
        warns.append(f"no boxes could be read from the answer: {_snip(span)}")
    return items, warns


def _bracket_pairs(text: str, start: int) -> dict[int, int | None]:
    """From ``text[start]`` (a bracket) to the bracket closing it: every ``{``/``[`` outside
    quoted strings → index just past its closer (None: unclosed). One linear pass."""
    pairs: dict[int, int | None] = {}
    stack: list[int] = []
    quote, escaped = "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            stack.append(i)
            pairs[i] = None
        elif ch in "]}" and stack:
            pairs[stack.pop()] = i + 1
            if not stack:
                break
    return pairs


def _keyed_items(text: str) -> list[tuple[Any, str]]:
    """Last resort: ``"bbox_2d": [..]`` patterns (with a following label if any)."""
    found = []
    for m in _KEYED.finditer(text):
        numbers = [_float_or_text(p) for p in m.group(2).split(",") if p.strip()]
        label = _LABEL_RE.search(text, m.end()) or _LABEL_RE.search(text)
        item: dict[str, Any] = {m.group(1).lower(): numbers}
        if label:
            item["label"] = label.group(1).strip()
        found.append((item, "read from malformed JSON by pattern"))
    return found


def _float_or_text(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text.strip()


def _to_box(raw: Any, n: int, scale: tuple[float, float], default_label: str,
            note: str) -> tuple[ParsedBox | None, str | None]:
    """One item → a normalised box, or None; plus at most one warning."""
    if isinstance(raw, (list, tuple)):  # a bare [x1, y1, x2, y2] box or [x, y] point
        raw = {"point_2d" if len(raw) == 2 and all(map(_is_number, raw)) else "bbox_2d": raw}
    if not isinstance(raw, dict):
        return None, f"item {n}: dropped, not an object: {_snip(raw)}"
    label = next((str(raw[k]).strip() for k in _LABEL_KEYS if raw.get(k) not in (None, "")),
                 default_label)
    name = f"item {n} ({label!r})" if label else f"item {n}"
    key = next((k for k in _BOX_KEYS + _POINT_KEYS if k in raw), None)
    if key is None:
        return None, f"{name}: dropped, no bbox_2d or point_2d in {_snip(raw)}"
    kind: Literal["box", "point"] = "point" if key in _POINT_KEYS else "box"
    notes = [note] if note else []
    numbers, reason = _numbers(raw[key], 2 if kind == "point" else 4, notes)
    if numbers is None:
        return None, f"{name}: dropped, {reason}: {_snip(raw[key])}"
    norm = [v / scale[i % 2] for i, v in enumerate(numbers)]
    bbox, reason = (_point_box(norm, notes) if kind == "point" else _fix_box(norm, notes))
    if bbox is None:
        return None, f"{name}: dropped, {reason}"
    box = ParsedBox(bbox=bbox, label=label, kind=kind)
    return box, (f"{name}: {', '.join(notes)}" if notes else None)


def _numbers(raw: Any, count: int, notes: list[str]) -> tuple[list[float] | None, str]:
    """``count`` finite numbers from ``raw``; numeric strings and corner pairs are repaired."""
    if not isinstance(raw, (list, tuple)):
        return None, "coordinates are not a list"
    if count == 4 and len(raw) == 2 and all(isinstance(p, (list, tuple)) and len(p) == 2
                                            for p in raw):
        raw = [*raw[0], *raw[1]]
        notes.append("corner pairs flattened")
    if len(raw) != count:
        return None, f"expected {count} coordinates, got {len(raw)}"
    values: list[float] = []
    for v in raw:
        if isinstance(v, str):
            try:
                v = float(v.strip())
            except ValueError:
                return None, "a coordinate is not a number"
            if "numbers given as text" not in notes:
                notes.append("numbers given as text")
        if not _is_number(v) or not math.isfinite(v):
            return None, "a coordinate is not a finite number"
        values.append(float(v))
    return values, ""


def _fix_box(v: list[float], notes: list[str]) -> tuple[Box | None, str]:
    x1, y1, x2, y2 = v
    if x1 > x2 or y1 > y2:
        x1, x2, y1, y2 = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
        notes.append("swapped corners")
    clipped = [min(1.0, max(0.0, c)) for c in (x1, y1, x2, y2)]
    if clipped != [x1, y1, x2, y2]:
        notes.append("clipped to the image")
    if clipped[2] - clipped[0] <= 0 or clipped[3] - clipped[1] <= 0:
        where = "outside the image" if "clipped to the image" in notes else "zero area"
        return None, where
    return (clipped[0], clipped[1], clipped[2], clipped[3]), ""


def _point_box(v: list[float], notes: list[str]) -> tuple[Box | None, str]:
    x, y = (min(1.0, max(0.0, c)) for c in v)
    if [x, y] != v:
        notes.append("point clipped to the image")
    h = POINT_BOX_SIZE / 2
    return (max(0.0, x - h), max(0.0, y - h), min(1.0, x + h), min(1.0, y + h)), ""


# ── coordinates ──────────────────────────────────────────────────────────────────────────────

def _round(value: float) -> int:
    return math.floor(value + 0.5)


def normalise_px(bbox_px: Sequence[float], size_wh: tuple[int, int]) -> Box:
    """Pixel box of an image of ``size_wh`` → normalised [x1, y1, x2, y2]."""
    w, h = size_wh
    return (bbox_px[0] / w, bbox_px[1] / h, bbox_px[2] / w, bbox_px[3] / h)


def denormalise(bbox: Sequence[float], size_wh: tuple[int, int]) -> tuple[int, int, int, int]:
    """Normalised box → integer pixels of ``size_wh``, clipped to [0, w] × [0, h] (x2 may be w)."""
    w, h = size_wh
    x1, y1, x2, y2 = (min(s, max(0, _round(c * s))) for c, s in zip(bbox, (w, h, w, h)))
    return (x1, y1, x2, y2)


def to_detection(box: ParsedBox, original_wh: tuple[int, int], *, t_s: float,
                 frame_index: int, score: float | None = None) -> Detection:
    """A parsed box on the original frame. The model input is a uniform resize without crop,
    so normalised-in-input equals normalised-in-original."""
    return Detection(t_s=float(t_s), frame_index=int(frame_index), bbox=tuple(box.bbox),
                     bbox_px=denormalise(box.bbox, original_wh), label=box.label,
                     score=None if score is None else round(float(score), 6))
