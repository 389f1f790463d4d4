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

Formats seen in published answers (``tests/data/qwen_answers.json``, docs/qwen_outputs.md): label
keys ``label``/``name``/``object_name``/``name_en``/``name_zh``/``text_content`` or a nested
``names`` object (its ``en`` first); one object with repeated keys
(``{"object_name": a, "bbox": …, "object_name": b, "bbox": …}``, QwenLM/Qwen3-VL#1720) is one
item per box; plain-text lines ``x1,y1,x2,y2 label`` (Qwen's spatial-understanding cookbook);
an unmatched ``{`` inside a complete answer is reported as malformed, not as cut off. A
Thinking model's reasoning (before ``</think>``) is never read for boxes
(``analysis.reasoning``).

The 0–1000 scale (QwenLM/Qwen3-VL#1741). Qwen's own code divides relative boxes by 1000
(the cookbooks' ``x / 1000 * width``) and its training-data tool rounds ``x / w * 1000`` and
clamps to [0, 1000], so 1000 is the right or bottom edge; Alibaba Cloud's docs say 0–999 and
the published answers top out at 999 (omni-recognition cookbook). Chord divides by 1000 and
takes 1000 as the edge, with no warning; a 999 lands 0.1 % short of the edge (under a pixel
below 1000 px); values past 1000 are clipped with a warning.

Points. A ``point_2d`` answer becomes a small box ``POINT_BOX_SIZE`` (2 % of each side) centred
on the point, ``kind="point"``. A degenerate box would be invisible when drawn and have zero IoU
when linking; the small box keeps the exact centre and ``kind`` records where it came from.

Item → box and pixel conversion live in :mod:`chord_core.analysis.boxes`; linking, segments,
summaries and interpolation in :mod:`chord_core.analysis.tracking`.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

from chord_core.analysis.boxes import BOX_KEYS as _BOX_KEYS
from chord_core.analysis.boxes import POINT_BOX_SIZE, ParsedBox, denormalise, item_to_box
from chord_core.analysis.boxes import POINT_KEYS as _POINT_KEYS
from chord_core.analysis.boxes import is_number as _is_number
from chord_core.analysis.boxes import normalise_px, to_detection
from chord_core.analysis.boxes import snip as _snip
from chord_core.analysis.reasoning import UNFINISHED_WARNING, split_reasoning
from chord_core.families import COORD_MODES

__all__ = ["POINT_BOX_SIZE", "ParseResult", "ParsedBox", "denormalise",
           "normalise_px", "parse_boxes", "to_detection"]

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_STRUCTURED = re.compile(r"\{|\[\s*[-+\d.]|bbox|point_2d", re.I)
_KEYED = re.compile(r"[\"']?(bbox_2d|bbox|point_2d)[\"']?\s*[:=]\s*\[([^\[\]]*)\]", re.I)
_LABEL_RE = re.compile(r"[\"']?label[\"']?\s*[:=]\s*[\"']?([^\"',}\]]*)", re.I)
# one "key": value pair of a JSON object: a string, a flat list, or a bare number/word
_PAIR = re.compile(r"[\"'](\w+)[\"']\s*:\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*'|\[[^\[\]]*\]|[-\w.]+)")
# a plain-text box line (Qwen's documented ``x1,y1,x2,y2 label``), brackets optional
_PLAIN = re.compile(r"^[ \t]*(?:[\[(][ \t]*)?(-?\d+(?:\.\d+)?)[ \t]*,[ \t]*(-?\d+(?:\.\d+)?)[ \t]*,"
                    r"[ \t]*(-?\d+(?:\.\d+)?)[ \t]*,[ \t]*(-?\d+(?:\.\d+)?)(?:[ \t]*[\])])?"
                    r"(?:[ \t:：-]+([^\n]*))?$", re.M)  # horizontal space only: linear time
_FAIL = object()


@dataclass
class ParseResult:
    """Boxes read from one answer, and one warning per dropped or repaired item."""

    boxes: list[ParsedBox] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ── parsing ──────────────────────────────────────────────────────────────────────────────────

def parse_boxes(text: str, input_wh: tuple[int, int], *, coords: str = "absolute",
                default_label: str = "", thinking: bool = False) -> ParseResult:
    """Read every box/point in one model answer. Never raises on ``text``.

    ``input_wh`` is the size of the image the model saw (used in ``absolute`` mode);
    ``default_label`` names items that carry no label (usually the query); ``thinking``: the
    model is a Thinking checkpoint, whose answer is only what follows ``</think>``.
    """
    if coords not in COORD_MODES:
        raise ValueError(f"coords must be one of {COORD_MODES}, got {coords!r}")
    if coords == "absolute" and (len(input_wh) != 2 or min(input_wh) <= 0):
        raise ValueError(f"input_wh must be two positive sizes, got {input_wh!r}")
    scale = (1000.0, 1000.0) if coords == "relative1000" else (float(input_wh[0]),
                                                                 float(input_wh[1]))
    result = ParseResult()
    split = split_reasoning(text if isinstance(text, str) else "", thinking=thinking)
    if split.unfinished:
        result.warnings.append(UNFINISHED_WARNING)
        return result
    items: list[tuple[Any, str]] = []
    for candidate, fenced in _candidates(split.answer):
        found, warns, understood = _items_from_candidate(candidate)
        if not found and not warns and not understood:
            found = _plain_lines(candidate)
            understood = bool(found)
        items.extend(found)
        result.warnings.extend(warns)
        if not understood and (_STRUCTURED.search(candidate) or (fenced and candidate.strip())):
            result.warnings.append(f"no boxes could be read from the answer: {_snip(candidate)}")
    for n, (raw, note) in enumerate(items, start=1):
        box, warning = item_to_box(raw, n, scale, default_label, note)
        if box is not None:
            result.boxes.append(box)
        if warning:
            result.warnings.append(warning)
    if result.warnings:
        log.debug("parse_boxes: %d box(es), warnings: %s", len(result.boxes), result.warnings)
    return result


def _plain_lines(text: str) -> list[tuple[Any, str]]:
    """Qwen's plain-text format, one box a line: ``138,769,315,954 蛋糕``."""
    return [({"bbox_2d": [float(v) for v in m.groups()[:4]],
              "label": (m.group(5) or "").strip()}, "") for m in _PLAIN.finditer(text)]


def _candidates(text: str) -> list[tuple[str, bool]]:
    """Fence bodies when there are non-empty fences, else the whole text (fences stripped)."""
    bodies = [m.group(1) for m in _FENCE.finditer(text) if m.group(1).strip()]
    if bodies:
        return [(b, True) for b in bodies]
    return [(text.replace("```", " "), False)]


class _Repeated(dict):
    """A JSON object that repeats its box key (``{"object_name": a, "bbox": …, "object_name":
    b, "bbox": …}``): ``groups`` holds one item per box, in order."""

    groups: list[dict[str, Any]]


def _pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; one that names several boxes as a ``_Repeated``."""
    if sum(k in _BOX_KEYS + _POINT_KEYS for k, _ in pairs) < 2:
        return dict(pairs)  # a repeated label alone is not a second item (the last wins)
    groups = _group_pairs(pairs)
    out = _Repeated(pairs)
    out.groups = groups
    return out


def _group_pairs(pairs: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Key/value pairs → items: a key seen again in the current item starts the next one."""
    groups: list[dict[str, Any]] = [{}]
    for key, value in pairs:
        if key in groups[-1]:
            groups.append({})
        groups[-1][key] = value
    return groups


def _literal(snippet: str) -> Any:
    """JSON, else a Python literal (single quotes, trailing commas), else ``_FAIL``."""
    try:
        return json.loads(snippet, object_pairs_hook=_pairs_hook)
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
    if isinstance(value, _Repeated):
        return list(value.groups), True
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


def _salvage(text: str, start: int, end: int | None, pairs: dict[int, int | None]
             ) -> tuple[list[tuple[Any, str]], list[str]]:
    """Complete objects inside the malformed (or, ``end`` None, cut-off) value at
    ``text[start:end]``; one warning per lost item. An unclosed ``{`` inside a value that does
    close is a stray bracket (malformed), not a cut."""
    items: list[tuple[Any, str]] = []
    warns: list[str] = []
    span = text[start:end]
    opens = [i for i in sorted(pairs) if text[i] == "{" and (end is None or i < end)]
    pos, stray, last_open = 0, False, None
    for i in opens:
        close = pairs[i]
        if i < pos:
            continue
        if close is None:  # unclosed: a wrapper, the cut-off last item, or a stray bracket
            stray, last_open = stray or end is not None, i
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
    if end is None and last_open is not None and last_open >= pos:
        items.extend(_repeated_pairs(text[last_open:]))
    if not opens:
        items.extend(_keyed_items(span))
    if end is None:
        warns.append(f"the answer was cut off at the per-frame length limit; kept {len(items)} "
                     f"complete item(s), dropped the rest: {_snip(span[-40:])}")
    elif stray:
        warns.append(f"the answer is malformed JSON (an unmatched '{{'); kept {len(items)} "
                     f"complete item(s): {_snip(span[:40])}")
    elif not items and not warns and (opens or _KEYED.search(span)):
        warns.append(f"no boxes could be read from the answer: {_snip(span)}")
    return items, warns


def _repeated_pairs(text: str) -> list[tuple[Any, str]]:
    """The complete boxes of a cut-off object that repeats its keys (QwenLM/Qwen3-VL#1720):
    its pairs read one by one, grouped into items; the unfinished last box is not a pair."""
    pairs = [(m.group(1), _literal(m.group(2))) for m in _PAIR.finditer(text)]
    pairs = [(k, v) for k, v in pairs if v is not _FAIL]
    if sum(k in _BOX_KEYS + _POINT_KEYS for k, _ in pairs) < 2:
        return []
    groups = _group_pairs(pairs)
    return [(g, "") for g in groups if any(k in g for k in _BOX_KEYS + _POINT_KEYS)]


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
            want = "[" if ch == "]" else "{"
            if text[stack[-1]] != want and any(text[j] == want for j in stack):
                while text[stack[-1]] != want:  # stray openers: left unclosed (None)
                    stack.pop()
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


