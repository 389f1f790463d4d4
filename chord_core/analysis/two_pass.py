"""Two-pass grounding: ask the whole clip WHEN the target is visible, then ground boxes only
on the sampled frames inside those spans.

Per-frame grounding (the exact path) asks the model about every sampled frame. Qwen3-VL reads
a video with a text timestamp before every frame pair and can answer "when" for the whole
clip in one request; where the target is visible in a small part of a clip, grounding only
that part costs one video request plus a fraction of the image requests. The first pass may
miss things a frame-by-frame look would find, so per-frame stays the default and the
result says which method produced it (``Result.method``; the spans in ``Result.spans``).

The first pass sees the frames already read for grounding, scaled down (and, for long clips,
thinned) to the request's visual-token budget; their times are the frames' own presentation
times. If its answer holds no usable span (nor a clear "never"), every frame is grounded
per frame, with a warning — the answer is never lost silently.
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from chord_core.analysis.spans import ParsedSpans, frames_in_spans, parse_spans

if TYPE_CHECKING:
    import numpy as np

    from chord_core.analysis.ground_chunks import GroundChunk
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.model.loading import LoadedModel
    from chord_core.types import SamplingPlan, VideoInfo

log = logging.getLogger(__name__)

SPANS_MAX_NEW_TOKENS = 256
SPANS_MAX_NEW_TOKENS_THINKING = 2048  # a Thinking model reasons about the clip first
MIN_MARGIN_S = 0.5
MIN_FRAMES = 4  # fewer sampled frames: a first pass costs more than it could save


def ask_spans(lm: LoadedModel, frames: np.ndarray, metadata: dict[str, Any], target: str,
              cancel: Any = None) -> Any:
    """The first pass: one video request asking when ``target`` is visible
    (``model.GenerationOutput``)."""
    from chord_core.model import loading as m
    from chord_core.model.prompts import spans_prompt

    tokens = SPANS_MAX_NEW_TOKENS_THINKING if lm.info.thinking else SPANS_MAX_NEW_TOKENS
    return m.describe(lm, frames, metadata, spans_prompt(target), tokens, cancel=cancel)


def span_frames(lm: LoadedModel, frames: np.ndarray, budget_tokens: int
                ) -> tuple[np.ndarray, list[int]]:
    """The grounding frames made to fit one video request of ``budget_tokens`` visual tokens:
    scaled down (never below 2×2 tokens a frame), then thinned evenly if still too many.
    Returns (frames, positions of the kept frames)."""
    import cv2
    import numpy as np

    vp = lm.processor.video_processor
    side = int(getattr(vp, "patch_size", 14)) * int(getattr(vp, "merge_size", 2))
    n, h, w = frames.shape[:3]
    per_frame = max(1, round(h / side)) * max(1, round(w / side))
    tokens = math.ceil(n / 2) * per_frame
    if tokens > budget_tokens:
        scale = math.sqrt(budget_tokens / tokens)
        h2 = max(2 * side, int(h * scale // side) * side)
        w2 = max(2 * side, int(w * scale // side) * side)
        if (h2, w2) != (h, w):
            frames = np.stack([cv2.resize(f, (w2, h2), interpolation=cv2.INTER_AREA)
                               for f in frames])
            per_frame = (h2 // side) * (w2 // side)
    keep = list(range(n))
    stride = math.ceil(math.ceil(n / 2) * per_frame / max(1, budget_tokens))
    if stride > 1:
        keep = keep[::stride]
    return frames[keep], keep


def ground_two_pass(lm: LoadedModel, info: VideoInfo, plan: SamplingPlan, frames: np.ndarray,
                    request: AnalysisRequest, clock: Any, *,
                    ground_frames: Callable[..., GroundChunk],
                    guard: Callable[..., Any]) -> dict:
    """The ``ground`` body (as ``engine.assemble_ground`` makes it) by two passes, plus
    ``method``, ``spans``, ``grounded_frames`` (the frame indices grounded) and the plan
    with a note saying how many of its frames were grounded (``plan``; every planned frame
    was read and shown to the first pass, so the plan itself stays whole).
    ``ground_frames``/``guard`` are the engine's per-frame grounding and OOM guard."""
    from chord_core.analysis.ground_chunks import assemble_ground
    from chord_core.media.sampling import video_metadata

    if plan.num_frames < MIN_FRAMES:  # a still image or a flash of a clip: nothing to skip
        body = _per_frame(lm, info, plan, frames, request, clock, ground_frames)
        body["warnings"] = list(body.get("warnings", ())) + [
            f"two-pass: {plan.num_frames} sampled frame(s) — grounded per frame"]
        return body
    clock.emit("generating", f"asking when {request.query!r} is visible", 0, 1)
    small, keep = span_frames(lm, frames, request.sampling.token_budget)
    meta = video_metadata(info, [plan.frame_indices[i] for i in keep])
    meta["timestamps_s"] = [plan.timestamps_s[i] for i in keep]
    reductions: list[str] = []
    first = guard(lambda: ask_spans(lm, small, meta, request.query, clock.cancel), reductions)
    parsed = parse_spans(first.text, info.duration_s, thinking=lm.info.thinking)
    notes = [f"two-pass spans: {w}" for w in parsed.warnings] + reductions
    if not parsed.usable:
        notes.append("two-pass: the first pass gave no usable time span; every sampled frame "
                     "was grounded (per_frame)")
        log.warning(notes[-1])
        return _with_first_pass(_per_frame(lm, info, plan, frames, request, clock,
                                           ground_frames), first, notes, (), "per_frame")
    margin = max(MIN_MARGIN_S, 1.0 / plan.fps if plan.fps > 0 else MIN_MARGIN_S)
    pos = frames_in_spans(plan.timestamps_s, parsed.spans, margin)
    sub = replace(plan, frame_indices=tuple(plan.frame_indices[i] for i in pos),
                  timestamps_s=tuple(plan.timestamps_s[i] for i in pos))
    clock.emit("generating", f"{len(pos)} of {plan.num_frames} frames inside the spans", 1, 1)
    chunk = ground_frames(lm, sub, frames[pos], request, clock)
    body = assemble_ground(info, sub, request.query, [chunk], lm.coord_mode,
                           thinking=lm.info.thinking)
    body["plan"] = replace(plan, notes=tuple(plan.notes) + (_note(plan, pos, parsed, margin),))
    body["grounded_frames"] = sub.frame_indices
    return _with_first_pass(body, first, notes, parsed.spans, "two_pass")


def _per_frame(lm: Any, info: Any, plan: Any, frames: Any, request: Any, clock: Any,
               ground_frames: Callable[..., Any]) -> dict:
    from chord_core.analysis.ground_chunks import assemble_ground

    chunk = ground_frames(lm, plan, frames, request, clock)
    return assemble_ground(info, plan, request.query, [chunk], lm.coord_mode,
                           thinking=lm.info.thinking)


def _note(plan: SamplingPlan, pos: list[int], parsed: ParsedSpans, margin: float) -> str:
    spans = ", ".join(f"{a:g}–{b:g} s" for a, b in parsed.spans) or "none"
    return (f"two-pass: grounded {len(pos)} of {plan.num_frames} sampled frames (spans "
            f"{spans}, ± {margin:.2f} s)")


def _with_first_pass(body: dict, first: Any, notes: list[str],
                     spans: tuple[tuple[float, float], ...], method: str) -> dict:
    """The first pass's answer leads ``raw_outputs``; its time counts in the totals."""
    body["raw_outputs"] = (first.text,) + tuple(body["raw_outputs"])
    body["warnings"] = list(body.get("warnings", ())) + notes
    body["preprocess_s"] = body.get("preprocess_s", 0.0) + first.preprocess_s
    body["generate_s"] = body.get("generate_s", 0.0) + first.generate_s
    body["method"], body["spans"] = method, tuple(spans)
    return body
