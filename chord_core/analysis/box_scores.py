"""A score for every grounded box: the probability that its region shows the target.

Each box parsed from a frame's answer is cropped from the frame the model saw (with a small
margin, resized into the entailment size range) and checked against "the image shows
<target>" with the same one-prefill mechanism as visual entailment (``entailment.py``):
``score`` = P(entailment). Boxes of every frame of a chunk are scored together in batches.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import numpy as np

MARGIN = 0.1  # of the box's size, on each side: a little context helps the check
MIN_SIDE = 56  # px: smaller crops are scaled up (the vision tower needs ≥ 28 px)
MAX_SIDE = 448


def crop(frame: np.ndarray, bbox: Sequence[float]) -> np.ndarray:
    """The box region of ``frame`` (normalised bbox), with a margin, sized for the model:
    sides in multiples of 28 between MIN_SIDE and MAX_SIDE, aspect kept where possible."""
    import numpy as np
    from PIL import Image

    h, w = frame.shape[:2]
    x1, y1, x2, y2 = bbox
    mx, my = (x2 - x1) * MARGIN, (y2 - y1) * MARGIN
    left, top = int(max(0.0, x1 - mx) * w), int(max(0.0, y1 - my) * h)
    right = max(left + 1, int(min(1.0, x2 + mx) * w))
    bottom = max(top + 1, int(min(1.0, y2 + my) * h))
    region = Image.fromarray(frame[top:bottom, left:right])
    scale = min(MAX_SIDE / max(region.size), max(1.0, MIN_SIDE / min(region.size)))
    size = tuple(min(MAX_SIDE, max(MIN_SIDE, 28 * round(s * scale / 28))) for s in region.size)
    return np.array(region.resize(size, Image.Resampling.BICUBIC), dtype=np.uint8)


def score_outputs(lm: Any, outputs: Sequence[Any], frames: np.ndarray, target: str, *,
                  batch_size: int = 16, cancel: threading.Event | None = None
                  ) -> tuple[tuple[Any, ...], float]:
    """``outputs`` (FrameOutput, one per frame of ``frames``) with ``scores`` filled in, and
    the seconds it took."""
    from chord_core.analysis import grounding as g
    from chord_core.analysis.entailment import score_images

    t0 = time.perf_counter()
    crops, owners = [], []
    for k, (out, frame) in enumerate(zip(outputs, frames)):
        parsed = g.parse_boxes(out.text, out.input_wh, coords=lm.coord_mode,
                               default_label=target, thinking=lm.info.thinking)  # as assembled
        for box in parsed.boxes:
            crops.append(crop(frame, box.bbox))
            owners.append(k)
    if not crops:
        return tuple(outputs), time.perf_counter() - t0
    statement = f"the image shows {target}"
    scores, _, _ = score_images(lm, crops, [statement] * len(crops), batch_size=batch_size,
                                cancel=cancel)
    per_frame: dict[int, list[float]] = {}
    for k, sc in zip(owners, scores):
        per_frame.setdefault(k, []).append(round(sc.probabilities["entailment"], 6))
    filled = tuple(replace(out, scores=tuple(per_frame.get(k, ()))) for k, out in
                   enumerate(outputs))
    return filled, time.perf_counter() - t0
