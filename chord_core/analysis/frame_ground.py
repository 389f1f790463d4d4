"""Per-frame grounding of a plan's frames: one request per frame, batched, then (when asked)
each box scored. On a cancel the frames already finished are not lost: the ``JobCancelled``
carries them as a ``GroundChunk`` (``exc.partial``), which the engine turns into a partial
Result, or a worker hands back as its share of a split job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from chord_core.analysis.ground_chunks import FrameOutput, GroundChunk
from chord_core.analysis.request import GROUND_MAX_NEW_TOKENS, AnalysisRequest, Clock
from chord_core.errors import JobCancelled
from chord_core.types import SamplingPlan

if TYPE_CHECKING:
    import numpy as np

    from chord_core.model.loading import LoadedModel


def frame_tokens(lm: LoadedModel, request: AnalysisRequest) -> int:
    """Each frame's answer limit: a few boxes of JSON (``GROUND_MAX_NEW_TOKENS``, lowered by
    the request's), but a Thinking model reasons first, so it gets the request's whole
    ``max_new_tokens``."""
    if getattr(lm.info, "thinking", False):
        return request.max_new_tokens
    return min(request.max_new_tokens, GROUND_MAX_NEW_TOKENS)


def ground_frames(lm: LoadedModel, sampling_plan: SamplingPlan, frames: np.ndarray,
                  request: AnalysisRequest, clock: Clock, *, batch_size: int,
                  guard: Callable) -> GroundChunk:
    """Raw answers for every frame of ``sampling_plan``. ``guard(call, reductions, batch)``
    runs a model call, halving ``batch[0]`` on out-of-memory (``Engine._oom_guard``)."""
    from chord_core.model import loading as m

    n = sampling_plan.num_frames
    clock.emit("grounding_frames", f"frame 0/{n}", 0, n)
    reductions: list[str] = []
    batch = [batch_size]
    t, done = time.perf_counter(), []  # done: outputs of the batches finished so far

    def run():
        done.clear()  # an out-of-memory retry starts over
        return m.ground_images(
            lm, list(frames), request.query, batch_size=batch[0],
            max_new_tokens=frame_tokens(lm, request),
            min_new_tokens=request.min_new_tokens,
            on_batch=lambda k, total: clock.emit("grounding_frames", f"frame {k}/{total}",
                                                 k, total),
            cancel=clock.cancel, into=done)

    def frame_outputs(outputs) -> tuple[FrameOutput, ...]:
        return tuple(FrameOutput(idx, ts, o.text, tuple(o.input_wh)) for o, idx, ts in
                     zip(outputs, sampling_plan.frame_indices, sampling_plan.timestamps_s))

    outs: tuple[FrameOutput, ...] = ()
    try:
        outputs = guard(run, reductions, batch)
        outs = frame_outputs(outputs)
        generate_s, score_s = time.perf_counter() - t, 0.0
        if request.score_boxes:
            from chord_core.analysis.box_scores import score_outputs
            from chord_core.media.reader_types import host_frames

            clock.emit("scoring", "scoring the boxes")
            host = host_frames(frames)  # crops are cut on the CPU
            outs, score_s = guard(lambda: score_outputs(
                lm, outs, host, request.query, batch_size=max(batch[0], 16),
                cancel=clock.cancel), reductions, batch)
    except JobCancelled as exc:  # hand back the frames finished before the cancel
        outs = outs or frame_outputs(done)
        exc.partial = GroundChunk(outs, generate_s=time.perf_counter() - t,
                                  warnings=tuple(reductions)) if outs else None
        raise
    return GroundChunk(outs, preprocess_s=sum(getattr(o, "preprocess_s", 0.0) for o in outputs),
                       generate_s=generate_s, score_s=score_s, warnings=tuple(reductions))
