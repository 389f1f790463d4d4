"""The GOP planner (pure): which keyframe each sampled frame is decoded from, how the reads
split over several decoders, and — where a task allows it — samples moved to keyframes.

A wanted frame k needs its group of pictures: decoding starts at the last keyframe at or
before k and runs up to k. Wanted frames that share a keyframe form one :class:`GopRead`;
reads are done keyframe to keyframe, so 16 frames a minute from 30 fps video decode only
the GOPs those frames need, and the tail of each GOP after its last wanted frame is never
decoded. A read whose only wanted frame is its keyframe decodes one frame.

:func:`snap_to_keyframes` moves each sample to the nearest keyframe in time (each keyframe
used once, a sample kept where it is when no free keyframe lies within ``max_move_s``), so
one frame is decoded per sample; it says how far every sample moved.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["GopRead", "plan_gops", "snap_to_keyframes", "split_reads"]


@dataclass(frozen=True)
class GopRead:
    """Decode from keyframe ``key`` until every frame of ``wanted`` (increasing) is out."""

    key: int
    wanted: tuple[int, ...]

    @property
    def cost(self) -> int:
        """Frames decoded at most (keyframe through the last wanted frame)."""
        return self.wanted[-1] - self.key + 1

    @property
    def keyframe_only(self) -> bool:
        return self.wanted == (self.key,)


def plan_gops(wanted: Sequence[int], keyframes: Sequence[int]) -> list[GopRead]:
    """One read per keyframe that some wanted frame (strictly increasing) decodes from."""
    reads: list[GopRead] = []
    group: list[int] = []
    key = -1
    for k in wanted:
        j = bisect.bisect_right(keyframes, k) - 1
        kf = keyframes[j] if j >= 0 else 0
        if group and kf != key:
            reads.append(GopRead(key, tuple(group)))
            group = []
        key = kf
        group.append(int(k))
    if group:
        reads.append(GopRead(key, tuple(group)))
    return reads


def split_reads(reads: Sequence[GopRead], parts: int) -> list[list[GopRead]]:
    """Consecutive runs of reads, at most ``parts`` of them, of about equal decoding cost
    (each part is one decoder's work, in clip order)."""
    parts = max(1, min(parts, len(reads)))
    total = sum(r.cost for r in reads)
    out: list[list[GopRead]] = [[]]
    done = 0
    for r in reads:
        share = total * len(out) / parts
        if out[-1] and done >= share and len(out) < parts:
            out.append([])
        out[-1].append(r)
        done += r.cost
    return [p for p in out if p]


def snap_to_keyframes(wanted: Sequence[int], keyframes: Sequence[int],
                      time_of: Callable[[int], float], max_move_s: float
                      ) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(frames, how far each moved in seconds, + later / − earlier): every sample on the
    keyframe nearest it in time that no earlier sample took, if within ``max_move_s``; else
    the sample itself (its GOP is decoded). Strictly increasing, one per sample."""
    out: list[int] = []
    moved: list[float] = []
    for k in wanted:
        floor = out[-1] if out else -1
        j = bisect.bisect_left(keyframes, k)
        near = [c for c in (keyframes[j - 1] if j > 0 else None,
                            keyframes[j] if j < len(keyframes) else None)
                if c is not None and c > floor]
        t = time_of(k)
        best = min(near, key=lambda c: abs(time_of(c) - t), default=None)
        pick = best if best is not None and abs(time_of(best) - t) <= max_move_s + 1e-9 \
            else k
        if pick <= floor:  # the sample itself is taken too: the next free frame
            pick = floor + 1
        out.append(pick)
        moved.append(round(time_of(pick) - t, 6))
    return tuple(out), tuple(moved)
