"""Model text → boxes → detections → tracks → segments.

    parse_boxes (text of one frame) ─▶ ParsedBox (normalised in the model INPUT image)
        ─▶ to_detection (+ time, frame index, original pixels)
        ─▶ link_tracks (ids over time) ─▶ segments_from_tracks (visible intervals)
        ─▶ interpolate_at / BoxTimeline (a box for any video frame, for rendering)

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

Linking — why not ByteTrack. ``sv.ByteTrack`` was removed in supervision 0.31 (the version
installed) in favour of ``ByteTrackTracker`` in Roboflow's separate ``trackers`` package (not a
dependency). Either way ByteTrack splits detections by confidence and drives a Kalman filter
tuned to dense frame rates (its lost-track buffer counts frames). Here the model gives no
scores and frames are sampled at 0.5–2 fps, so objects move far between samples. Instead:
per sampled frame, Hungarian assignment (scipy ``linear_sum_assignment``) of detections to
tracks seen within ``max_gap_s``, cost = (1 − IoU) + centre distance against a constant-velocity
prediction, gated by IoU or centre distance, labels compatible (equal or one empty). Then a
detection still unmatched may resume a track lost for longer than ``max_gap_s`` that has the
same label (nearest first): without appearance features a returning object is re-identified
by its label, so one target that leaves and comes back keeps its id and gets two segments.
Tracks seen within the gap are never taken this way (a new object next to a present one gets
its own id). With several same-label objects leaving and entering, ids can be swapped; pass
``relink=False`` to give every return a new id instead.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
import warnings
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Sequence

from chord_core.types import Detection, Segment, Track

log = logging.getLogger(__name__)

Box = tuple[float, float, float, float]
POINT_BOX_SIZE = 0.02
MAX_CENTER_DISTANCE = 0.3
COORD_MODES = ("absolute", "relative1000")
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
        warns.append(f"the answer was cut off (raise max new tokens); kept {len(items)} "
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
                 frame_index: int) -> Detection:
    """A parsed box on the original frame. The model input is a uniform resize without crop,
    so normalised-in-input equals normalised-in-original."""
    return Detection(t_s=float(t_s), frame_index=int(frame_index), bbox=tuple(box.bbox),
                     bbox_px=denormalise(box.bbox, original_wh), label=box.label)


# ── linking ──────────────────────────────────────────────────────────────────────────────────

def default_max_gap(sample_interval_s: float) -> float:
    """Largest gap still counted as continuous: 1.5 sampling intervals — absorbs timestamp
    jitter of uneven sampling; one missed sample (a gap of 2 intervals) splits a segment."""
    return 1.5 * sample_interval_s


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two [x1, y1, x2, y2] boxes (0 when disjoint or empty)."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _centre_distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.hypot((a[0] + a[2] - b[0] - b[2]) / 2, (a[1] + a[3] - b[1] - b[3]) / 2)


def _label_key(label: str) -> str:
    return " ".join(label.lower().split())


@dataclass
class _TrackState:
    track_id: int
    history: list[Detection]

    @property
    def last(self) -> Detection:
        return self.history[-1]

    def predict(self, t_s: float) -> Box:
        """Last box moved at the velocity of the last two detections (constant velocity)."""
        last = self.last
        if len(self.history) < 2 or last.t_s <= self.history[-2].t_s:
            return last.bbox
        prev = self.history[-2]
        k = (t_s - last.t_s) / (last.t_s - prev.t_s)
        dx = ((last.bbox[0] + last.bbox[2]) - (prev.bbox[0] + prev.bbox[2])) / 2 * k
        dy = ((last.bbox[1] + last.bbox[3]) - (prev.bbox[1] + prev.bbox[3])) / 2 * k
        b = last.bbox
        return (b[0] + dx, b[1] + dy, b[2] + dx, b[3] + dy)


def _assign(cost: list[list[float]]) -> list[tuple[int, int]]:
    """Hungarian assignment on a (rows × cols) cost with ``inf`` = forbidden."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    if not cost or not cost[0]:
        return []
    matrix = np.array(cost, dtype=float)
    allowed = np.isfinite(matrix)
    if not allowed.any():
        return []
    matrix[~allowed] = matrix[allowed].max() * 10 + 1e6
    rows, cols = linear_sum_assignment(matrix)
    return [(int(r), int(c)) for r, c in zip(rows, cols) if allowed[r, c]]


def _motion_cost(track: _TrackState, det: Detection, iou_threshold: float,
                 max_center_distance: float) -> float:
    a, b = _label_key(track.last.label), _label_key(det.label)
    if a and b and a != b:
        return math.inf
    pred = track.predict(det.t_s)
    overlap = iou(pred, det.bbox)
    dist = _centre_distance(pred, det.bbox)
    if overlap < iou_threshold and dist > max_center_distance:
        return math.inf
    return (1.0 - overlap) + dist


def _relink_cost(track: _TrackState, det: Detection) -> float:
    if _label_key(track.last.label) != _label_key(det.label):
        return math.inf
    return _centre_distance(track.last.bbox, det.bbox)


def _frames(detections: Sequence[Detection]) -> list[list[Detection]]:
    """Detections grouped by sampled frame, in time order (stable within a frame)."""
    ordered = sorted(detections, key=lambda d: d.t_s)
    groups: list[list[Detection]] = []
    for det in ordered:
        if groups and (groups[-1][0].t_s, groups[-1][0].frame_index) == (det.t_s,
                                                                         det.frame_index):
            groups[-1].append(det)
        else:
            groups.append([det])
    return groups


def link_tracks(detections: Sequence[Detection], *, max_gap_s: float, iou_threshold: float = 0.1,
                max_center_distance: float = MAX_CENTER_DISTANCE, relink: bool = True,
                ) -> tuple[tuple[Detection, ...], tuple[Track, ...]]:
    """Give every detection a ``track_id`` (1, 2, … by first appearance); see module docstring.

    Returns the detections in time order with ids set, and one ``Track`` per id.
    """
    tracks: list[_TrackState] = []
    out: list[Detection] = []
    for frame in _frames(detections):
        t = frame[0].t_s
        active = [tr for tr in tracks if 0 < t - tr.last.t_s <= max_gap_s + 1e-9]
        cost = [[_motion_cost(tr, d, iou_threshold, max_center_distance) for tr in active]
                for d in frame]
        chosen = {r: active[c] for r, c in _assign(cost)}
        chosen.update(_unambiguous(frame, chosen, active))
        if relink:
            left = [i for i in range(len(frame)) if i not in chosen]
            free = [tr for tr in tracks if t - tr.last.t_s > max_gap_s + 1e-9]
            cost = [[_relink_cost(tr, frame[i]) for tr in free] for i in left]
            chosen.update({left[r]: free[c] for r, c in _assign(cost)})
        for i, det in enumerate(frame):
            state = chosen.get(i)
            if state is None:
                state = _TrackState(len(tracks) + 1, [])
                tracks.append(state)
            det = replace(det, track_id=state.track_id)
            state.history.append(det)
            out.append(det)
    return tuple(out), tuple(_track_summary(tr) for tr in tracks)


UNAMBIGUOUS_MAX_DISTANCE = 0.5


def _unambiguous(frame: Sequence[Detection], chosen: dict[int, _TrackState],
                 active: Sequence[_TrackState]) -> dict[int, _TrackState]:
    """Fast motion between sparse samples can exceed the motion gate. When a label has
    exactly one unmatched detection and exactly one unmatched active track, they are the
    same object: link them (no competitor to confuse it with) — unless the jump is so large
    (over ``UNAMBIGUOUS_MAX_DISTANCE`` of the frame) that a new object is likelier."""
    taken = {id(tr) for tr in chosen.values()}
    free_tracks = [tr for tr in active if id(tr) not in taken]
    free_dets = [i for i in range(len(frame)) if i not in chosen]
    links: dict[int, _TrackState] = {}
    for key in {_label_key(frame[i].label) for i in free_dets}:
        dets = [i for i in free_dets if _label_key(frame[i].label) == key]
        trs = [tr for tr in free_tracks if _label_key(tr.last.label) == key]
        if len(dets) == 1 and len(trs) == 1 and _centre_distance(
                trs[0].last.bbox, frame[dets[0]].bbox) <= UNAMBIGUOUS_MAX_DISTANCE:
            links[dets[0]] = trs[0]
    return links


def _track_summary(state: _TrackState) -> Track:
    counts = Counter(_label_key(d.label) for d in state.history)
    top = counts.most_common(1)[0][0]
    label = next(d.label for d in state.history if _label_key(d.label) == top)
    return Track(track_id=state.track_id, label=label, start_s=state.history[0].t_s,
                 end_s=state.history[-1].t_s, num_detections=len(state.history))


# ── segments ─────────────────────────────────────────────────────────────────────────────────

def segments_from_tracks(detections: Sequence[Detection], tracks: Sequence[Track], *,
                         max_gap_s: float, duration_s: float | None = None) -> tuple[Segment, ...]:
    """Per track, maximal runs of detections ≤ ``max_gap_s`` apart → [first, last] time.

    A run of one detection gives ``start_s == end_s`` (seen on one sampled frame; its true
    extent is unknown within ± one sampling interval). Times are clipped to [0, duration_s]
    when given. Detections of unknown tracks (id -1) are ignored. Sorted by start, then id.
    """
    times: dict[int, list[float]] = {tr.track_id: [] for tr in tracks}
    for det in detections:
        if det.track_id in times:
            times[det.track_id].append(det.t_s)
    segments = []
    for tr in tracks:
        ts = sorted(times[tr.track_id])
        run_start = 0
        for i in range(1, len(ts) + 1):
            if i == len(ts) or ts[i] - ts[i - 1] > max_gap_s + 1e-9:
                start, end = ts[run_start], ts[i - 1]
                if duration_s is not None:
                    start, end = (min(max(0.0, v), duration_s) for v in (start, end))
                segments.append(Segment(tr.track_id, start, end, tr.label))
                run_start = i
    return tuple(sorted(segments, key=lambda s: (s.start_s, s.track_id)))


def summary_line(segments: Sequence[Segment], num_frames: int | None = None) -> str:
    """One line for people: "appears in 2 segments: 3.5–7.0 s, 12.0–15.5 s" or
    "not found in 60 sampled frames". Overlapping segments of several tracks are merged."""
    if not segments:
        return f"not found in {num_frames} sampled frames" if num_frames is not None \
            else "not found"
    merged: list[list[float]] = []
    for seg in sorted(segments, key=lambda s: s.start_s):
        if merged and seg.start_s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], seg.end_s)
        else:
            merged.append([seg.start_s, seg.end_s])
    spans = ", ".join(f"{a:.1f} s" if a == b else f"{a:.1f}–{b:.1f} s" for a, b in merged)
    noun = "segment" if len(merged) == 1 else "segments"
    n_tracks = len({s.track_id for s in segments})
    extra = f" ({n_tracks} tracks)" if n_tracks > 1 else ""
    return f"appears in {len(merged)} {noun}: {spans}{extra}"


# ── boxes at any time (rendering) ────────────────────────────────────────────────────────────

class BoxTimeline:
    """Detections indexed by track, to ask for boxes at any time (every video frame).

    Within a track: the detection itself when ``t`` is within ``snap_s`` of it (half a video
    frame), else linear interpolation between the two surrounding detections when they are
    ≤ ``max_gap_s`` apart (``interpolated=True``), else nothing.
    """

    def __init__(self, detections: Sequence[Detection], *, max_gap_s: float,
                 snap_s: float = 1e-6) -> None:
        self.max_gap_s = max_gap_s
        self.snap_s = snap_s
        groups: dict[int, list[Detection]] = {}
        for n, det in enumerate(detections):
            key = det.track_id if det.track_id >= 1 else -1 - n  # unlinked: alone
            groups.setdefault(key, []).append(det)
        self._tracks = [sorted(g, key=lambda d: d.t_s) for _, g in sorted(groups.items())]
        self._times = [[d.t_s for d in g] for g in self._tracks]

    def at(self, t_s: float, *, frame_index: int = -1) -> list[Detection]:
        """Boxes visible at ``t_s``; interpolated ones get ``frame_index``."""
        found = []
        for dets, times in zip(self._tracks, self._times):
            i = bisect_left(times, t_s)
            near = [j for j in (i - 1, i) if 0 <= j < len(times)]
            best = min(near, key=lambda j: abs(times[j] - t_s), default=None)
            if best is not None and abs(times[best] - t_s) <= self.snap_s:
                found.append(dets[best])
            elif 0 < i < len(times) and times[i] - times[i - 1] <= self.max_gap_s + 1e-9:
                found.append(_lerp(dets[i - 1], dets[i], t_s, frame_index))
        return found


def _lerp(a: Detection, b: Detection, t_s: float, frame_index: int) -> Detection:
    k = (t_s - a.t_s) / (b.t_s - a.t_s)
    x1, y1, x2, y2 = (p + (q - p) * k for p, q in zip(a.bbox, b.bbox))
    p1, q1, p2, q2 = (_round(p + (q - p) * k) for p, q in zip(a.bbox_px, b.bbox_px))
    return Detection(t_s=t_s, frame_index=frame_index, bbox=(x1, y1, x2, y2),
                     bbox_px=(p1, q1, p2, q2), label=a.label, track_id=a.track_id,
                     interpolated=True)


def interpolate_at(detections: Sequence[Detection], t_s: float, *, max_gap_s: float,
                   snap_s: float = 1e-6, frame_index: int = -1) -> list[Detection]:
    """Boxes at time ``t_s`` (see ``BoxTimeline``); for many times build a BoxTimeline once."""
    return BoxTimeline(detections, max_gap_s=max_gap_s, snap_s=snap_s).at(
        t_s, frame_index=frame_index)
