"""Grounding's raw outputs per frame, and how slices of them become one result.

A grounding job may be split over workers (``runtime/manager.py``); each returns a
``GroundChunk`` of raw answers, and ``assemble_ground`` parses, links tracks and cuts segments
over all of them in frame order — the same code the single-clip path runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Sequence

from chord_core.analysis import grounding as g
from chord_core.analysis import tracking as tr
from chord_core.analysis.request import AnalysisRequest, build_result
from chord_core.types import (
    Detection,
    ModelInfo,
    Result,
    SamplingPlan,
    Timing,
    VideoInfo,
)


@dataclass(frozen=True)
class FrameOutput:
    """The model's raw answer for one grounded frame."""

    frame_index: int
    t_s: float
    text: str
    input_wh: tuple[int, int]
    scores: tuple[float, ...] = ()  # P(the box shows the target), per parsed box in order


@dataclass(frozen=True)
class GroundChunk:
    """Raw grounding outputs of a slice of frames; plain data (crosses processes)."""

    outputs: tuple[FrameOutput, ...]
    preprocess_s: float = 0.0
    generate_s: float = 0.0
    decode_s: float = 0.0
    score_s: float = 0.0  # of which scoring the boxes
    warnings: tuple[str, ...] = ()


def assemble_ground(info: VideoInfo, sampling_plan: SamplingPlan, target: str,
                    chunks: Sequence[GroundChunk], coord_mode: str, *,
                    thinking: bool = False) -> dict:
    """Merge chunk outputs (in frame order), parse, link tracks, cut segments — pure.
    ``thinking``: a Thinking model, whose boxes are read only from after ``</think>``."""
    outputs = sorted((o for c in chunks for o in c.outputs), key=lambda o: o.frame_index)
    detections: list[Detection] = []
    warnings: list[str] = [w for c in chunks for w in c.warnings]
    for out in outputs:
        parsed = g.parse_boxes(out.text, out.input_wh, coords=coord_mode, default_label=target,
                               thinking=thinking)
        warnings.extend(f"frame {out.frame_index} (t={out.t_s:.2f} s): {w}"
                        for w in parsed.warnings)
        scores = list(out.scores) + [None] * (len(parsed.boxes) - len(out.scores))
        detections.extend(g.to_detection(box, info.size_wh, t_s=out.t_s,
                                         frame_index=out.frame_index, score=score)
                          for box, score in zip(parsed.boxes, scores))
    gap = tr.default_max_gap(1.0 / sampling_plan.fps if sampling_plan.fps > 0 else 1.0)
    linked, tracks = tr.link_tracks(detections, max_gap_s=gap)
    segments = tr.segments_from_tracks(linked, tracks, max_gap_s=gap, duration_s=info.duration_s)
    return {"detections": tuple(linked), "tracks": tuple(tracks), "segments": tuple(segments),
            "raw_outputs": tuple(o.text for o in outputs), "warnings": warnings,
            "method": "per_frame",
            "preprocess_s": sum(c.preprocess_s for c in chunks),
            "generate_s": sum(c.generate_s + c.score_s for c in chunks),
            "score_s": sum(c.score_s for c in chunks)}


def done_frames(sampling_plan: SamplingPlan, chunks: Sequence[GroundChunk]
                ) -> tuple[SamplingPlan, str]:
    """The plan cut down to the frames the chunks hold (a cancelled job's frames done, in
    frame order, with the times they were read at), and the note saying so."""
    outs = sorted((o for c in chunks for o in c.outputs), key=lambda o: o.frame_index)
    done = replace(sampling_plan, frame_indices=tuple(o.frame_index for o in outs),
                   timestamps_s=tuple(o.t_s for o in outs))
    return done, (f"partial result: the job was cancelled after {len(outs)} of "
                  f"{sampling_plan.num_frames} planned frames were grounded; only those are in it")


def merge_chunks(request: AnalysisRequest, info: VideoInfo, sampling_plan: SamplingPlan,
                 chunks: Sequence[GroundChunk], model: ModelInfo, *, probe_s: float,
                 t0: float, partial: bool = False) -> Result:
    """One grounding Result from the chunks of a split job (``t0``: when it was planned,
    wall-clock seconds). ``partial``: the job was cancelled and the chunks hold only the
    frames done by then; the result lists just those frames and says it is partial."""
    note = ""
    if partial:
        sampling_plan, note = done_frames(sampling_plan, chunks)
    body = assemble_ground(info, sampling_plan, request.query, chunks, model.coords,
                           thinking=model.thinking)
    timing = Timing(probe_s=probe_s, decode_s=sum(c.decode_s for c in chunks),
                    preprocess_s=body.pop("preprocess_s"), generate_s=body.pop("generate_s"),
                    score_s=body.pop("score_s", 0.0), total_s=time.time() - t0)
    warnings = ((note,) if note else ()) + tuple(info.warnings) + tuple(sampling_plan.notes) \
        + tuple(body.pop("warnings"))
    return build_result(request, info, sampling_plan, model, timing, warnings, partial=partial,
                        **body)
