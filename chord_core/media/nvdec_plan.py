"""Which NVDEC session decodes which GOP (pure): list scheduling by decoded-frame cost.

A read's GOPs (:class:`~chord_core.media.gop.GopRead`) are placed one by one, in clip order,
on the session ("lane") that would finish that GOP first, counting what is already queued
on each lane — the unfinished GOPs of earlier reads included, so a read submitted while
another is still decoding fills the sessions that are about to be free instead of waiting
for the busiest. A GOP costs the frames decoded for it (its keyframe through its last
wanted frame: the GOP's head is decoded even when only its tail is wanted), plus:

* nothing more when the lane's last frame lies just before it in the same or the previous
  GOP (the session decodes on without a seek: consecutive GOPs stay on one lane when that
  is as fast as spreading them);
* ``SEEK_COST`` frames when the lane must seek forward (a demuxer seek and a decoder flush);
* ``OPEN_COST`` frames for a lane not open yet (a session opens the file and a decoder);
* ``BACKWARD_COST`` frames when the lane's last frame is at or after the GOP's first wanted
  frame: PyNvVideoCodec then reopens the file (``ResetDecoderIfRequired``), so a backward
  lane is chosen only when every forward choice is slower than that.

New lanes are opened up to ``cap`` (``CHORD_NVDEC_DECODERS``). Each lane decodes its GOPs in
the order given, never going backwards unless it was placed there as a backward lane, and
each GOP goes to exactly one lane: no GOP is decoded twice for one read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from chord_core.media.gop import GopRead

__all__ = ["BACKWARD_COST", "Lane", "OPEN_COST", "SEEK_COST", "assign", "busy_share",
           "step_cost"]

SEEK_COST = 8  # frames: a seek and a decoder flush
OPEN_COST = 48  # frames: opening a session (8 sessions of an hour's MP4: 0.13 s on an H200)
BACKWARD_COST = 240  # frames: a session asked behind its last frame reopens the file


@dataclass
class Lane:
    """A session as the planner sees it: its last frame once its queue is done (−1: none),
    the cost queued on it and not yet decoded, and whether it is open."""

    last: int = -1
    queued: float = 0.0
    opened: bool = False


def step_cost(last: int, read: GopRead) -> float:
    """Frames a lane whose last frame is ``last`` decodes for ``read``, with its seek or
    reopen counted as frames (see module docstring)."""
    if last >= read.wanted[0]:
        return BACKWARD_COST + read.cost
    if last >= 0 and read.key <= last + 1:  # on from the frame after ``last``
        return read.wanted[-1] - last
    return (SEEK_COST if last >= 0 else 0) + read.cost


def assign(reads: Sequence[GopRead], lanes: list[Lane], cap: int) -> list[int]:
    """The lane (index into ``lanes``) of each read, in order; ``lanes`` is updated in place
    (queued cost, last frame) and grows, up to ``cap`` lanes, when a new session is the
    fastest choice. Ties go to the lowest lane (deterministic)."""
    out: list[int] = []
    for r in reads:
        best: tuple[float, int] | None = None
        for i, lane in enumerate(lanes):
            opening = 0.0 if lane.opened or lane.queued else OPEN_COST
            finish = lane.queued + opening + step_cost(lane.last, r)
            if best is None or finish < best[0]:
                best = (finish, i)
        if len(lanes) < max(1, cap):
            fresh = OPEN_COST + step_cost(-1, r)
            if best is None or fresh < best[0]:
                lanes.append(Lane())
                best = (fresh, len(lanes) - 1)
        assert best is not None
        finish, i = best
        lanes[i].queued = finish
        lanes[i].last = r.wanted[-1]
        out.append(i)
    return out


def busy_share(reads: Sequence[GopRead], cap: int) -> float:
    """Mean share of ``cap`` open, idle sessions kept busy by ``reads`` placed by
    :func:`assign`: the total cost over ``cap`` × the busiest lane's (1.0: even)."""
    lanes = [Lane(opened=True) for _ in range(max(1, cap))]
    assign(reads, lanes, cap)
    longest = max((lane.queued for lane in lanes), default=0.0)
    total = sum(lane.queued for lane in lanes)
    return total / (max(1, cap) * longest) if longest else 0.0
