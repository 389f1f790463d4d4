"""One parsed item → a normalised box, and boxes ↔ pixels (pure; ``grounding`` uses it).

An item is a dict (or a bare list) read from model text; ``item_to_box`` makes it a
``ParsedBox`` normalised in the model INPUT image, repairing what can be repaired (numbers as
text, corner pairs, swapped corners, boxes past the edge) and saying so, or dropping it with
the reason. ``to_detection`` puts a box on the original frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from chord_core.analysis.tracking import Box
from chord_core.types import Detection

POINT_BOX_SIZE = 0.02
BOX_KEYS = ("bbox_2d", "bbox", "box")
POINT_KEYS = ("point_2d", "point")
LABEL_KEYS = ("label", "name", "object_name", "object", "category", "name_en", "name_zh",
              "text_content", "names")


@dataclass(frozen=True)
class ParsedBox:
    """One box read from model text: ``bbox`` normalised [x1, y1, x2, y2] of the INPUT image."""

    bbox: Box
    label: str = ""
    kind: Literal["box", "point"] = "box"


def snip(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")



def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)



def item_to_box(raw: Any, n: int, scale: tuple[float, float], default_label: str,
            note: str) -> tuple[ParsedBox | None, str | None]:
    """One item → a normalised box, or None; plus at most one warning."""
    if isinstance(raw, (list, tuple)):  # a bare [x1, y1, x2, y2] box or [x, y] point
        raw = {"point_2d" if len(raw) == 2 and all(map(is_number, raw)) else "bbox_2d": raw}
    if not isinstance(raw, dict):
        return None, f"item {n}: dropped, not an object: {snip(raw)}"
    label = next((_label_text(raw[k]) for k in LABEL_KEYS if raw.get(k) not in (None, "")),
                 default_label) or default_label
    name = f"item {n} ({label!r})" if label else f"item {n}"
    key = next((k for k in BOX_KEYS + POINT_KEYS if k in raw), None)
    if key is None:
        return None, f"{name}: dropped, no bbox_2d or point_2d in {snip(raw)}"
    kind: Literal["box", "point"] = "point" if key in POINT_KEYS else "box"
    notes = [note] if note else []
    numbers, reason = _numbers(raw[key], 2 if kind == "point" else 4, notes)
    if numbers is None:
        return None, f"{name}: dropped, {reason}: {snip(raw[key])}"
    norm = [v / scale[i % 2] for i, v in enumerate(numbers)]
    bbox, reason = (_point_box(norm, notes) if kind == "point" else _fix_box(norm, notes))
    if bbox is None:
        return None, f"{name}: dropped, {reason}"
    box = ParsedBox(bbox=bbox, label=label, kind=kind)
    return box, (f"{name}: {', '.join(notes)}" if notes else None)


def _label_text(value: Any) -> str:
    """A label value as text; a nested ``names`` object gives its English name first."""
    if isinstance(value, dict):
        inner = [value.get(k) for k in ("en", "name", "label")] + list(value.values())
        return next((str(v).strip() for v in inner if isinstance(v, str) and v.strip()), "")
    return str(value).strip()


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
        if not is_number(v) or not math.isfinite(v):
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
