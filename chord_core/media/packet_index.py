"""The packet index of a video stream: every frame's presentation time and which frames are
keyframes, read by demuxing alone (PyAV, ``packet.is_keyframe``; nothing is decoded).

Frame k is the k-th frame in presentation order (what sampling plans count): the packets'
pts sorted. An index is ``usable`` for keyframe-to-keyframe reading only when it proves that
mapping: every packet carries a pts, no two share one, and no keyframe starts earlier than a
frame before it (a restarted clock: concatenated recordings, MPEG-TS wraps). Anything else
is read front to back by the default reader instead. Times are seconds from frame 0's pts —
the stream's start time and any edit-list shift (a first pts of −1024 in 1/15360) cancel
out, as in the probe's timeline (:mod:`chord_core.media.frame_times`).

A scan of an hour of 720p (≈ 108,000 packets) is a demux pass over the file; the last few
indexes are cached per process by (path, size, modification time).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

from chord_core.media.confined import source

__all__ = ["PacketIndex", "index_from_packets", "packet_index"]

log = logging.getLogger(__name__)

CACHE_ENTRIES = 8
INTRA_ONLY = frozenset({"mjpeg", "rawvideo", "ffv1", "huffyuv", "png", "prores", "dnxhd"})
_cache: OrderedDict[tuple, PacketIndex | None] = OrderedDict()
_cache_lock = threading.Lock()
_building: dict[tuple, threading.Lock] = {}  # a file's scan in progress (one at a time)


@dataclass(frozen=True)
class PacketIndex:
    """What demuxing learned (see module docstring). ``complete`` False: the file ended in
    a damaged packet or a demux error (a truncated file): frames past ``pts`` are not there."""

    time_base: Fraction
    pts: tuple[int, ...]
    keyframes: tuple[int, ...]
    codec: str = ""
    pix_fmt: str = ""
    size_wh: tuple[int, int] = (0, 0)
    usable: bool = True
    why: str = ""
    complete: bool = True

    @property
    def frame_count(self) -> int:
        return len(self.pts)

    def time_s(self, k: int) -> float:
        """Frame ``k``'s presentation time, seconds from frame 0."""
        return float((self.pts[k] - self.pts[0]) * self.time_base)

    def index_of_pts(self, pts: int | None) -> int | None:
        """The frame whose pts this is, or None."""
        if pts is None:
            return None
        k = bisect.bisect_left(self.pts, pts)
        return k if k < len(self.pts) and self.pts[k] == pts else None

    def key_before(self, k: int) -> int:
        """The last keyframe at or before frame ``k`` (frame 0 when none is)."""
        j = bisect.bisect_right(self.keyframes, k) - 1
        return self.keyframes[j] if j >= 0 else 0


def index_from_packets(packets: Iterable[tuple[int | None, bool]], time_base: Fraction, *,
                       codec: str = "", pix_fmt: str = "", size_wh: tuple[int, int] = (0, 0),
                       complete: bool = True) -> PacketIndex:
    """The index of packets given as (pts, is_keyframe) in decode order (pure; the fake
    decoder of the tests builds its index here too)."""
    pts: list[int] = []
    keys: list[int] = []
    why, top = "", None
    for p, key in packets:
        if p is None:
            why = why or "a packet carries no timestamp"
            continue
        if key and top is not None and p <= top:
            why = why or f"a keyframe at pts {p} starts before an earlier frame (pts {top})"
        if key:
            keys.append(int(p))
        pts.append(int(p))
        top = p if top is None else max(top, p)
    ordered = sorted(pts)
    if len(set(ordered)) != len(ordered):
        why = why or "two packets share a timestamp"
    if not ordered:
        why = why or "no video packets"
    if ordered and not keys:
        why = why or "no packet is marked as a keyframe"
    key_idx = sorted({bisect.bisect_left(ordered, k) for k in keys})
    return PacketIndex(Fraction(time_base), tuple(ordered), tuple(key_idx), codec, pix_fmt,
                       size_wh, not why, why, complete)


def packet_index(path: str | Path) -> PacketIndex | None:
    """The packet index of ``path``'s first video stream; None when PyAV is missing or the
    file does not open (cached; see module docstring)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError:
        return None
    key = (os.path.realpath(p), st.st_size, st.st_mtime_ns)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
        building = _building.setdefault(key, threading.Lock())
    # one scan a file at a time: the reads that arrive together (a worker's batch and its
    # read-ahead, four at once) wait for the first one's scan instead of each demuxing the
    # hour again, side by side, on one GIL
    with building:
        with _cache_lock:
            if key in _cache:
                _cache.move_to_end(key)
                return _cache[key]
        try:
            got = _scan(p)
            with _cache_lock:
                _cache[key] = got
                while len(_cache) > CACHE_ENTRIES:
                    _cache.popitem(last=False)
        finally:  # a scan that raised leaves no entry behind
            with _cache_lock:
                _building.pop(key, None)
    return got


def _stream_facts(stream: Any) -> tuple[str, str, tuple[int, int]]:
    ctx = stream.codec_context
    fmt = getattr(ctx, "pix_fmt", None) or getattr(getattr(ctx, "format", None), "name", "")
    return str(ctx.name or ""), str(fmt or ""), (int(ctx.width or 0), int(ctx.height or 0))


def _scan(p: Path) -> PacketIndex | None:
    try:
        import av
    except ImportError:
        return None
    found: list[tuple[int | None, bool]] = []
    complete = True
    try:
        with source(p) as src, av.open(src) as box:
            if not box.streams.video:
                return None
            stream = box.streams.video[0]
            codec, pix_fmt, size = _stream_facts(stream)
            fmt = str(box.format.name or "").split(",")[0]
            tb = Fraction(stream.time_base or 0)
            try:
                for packet in box.demux(stream):
                    if packet.size == 0 or packet.is_discard:
                        continue
                    if packet.is_corrupt:
                        complete = False
                        break
                    found.append((packet.pts, bool(packet.is_keyframe)))
            except av.error.FFmpegError as exc:  # a truncated file: what came before counts
                log.info("%s: demuxing stopped after %d packets (%s)", p.name, len(found), exc)
                complete = False
    except (av.error.FFmpegError, OSError) as exc:
        log.info("%s: no packet index (%s)", p.name, exc)
        return None
    if not tb:
        return None
    got = index_from_packets(found, tb, codec=codec, pix_fmt=pix_fmt, size_wh=size,
                             complete=complete)
    if got.usable and fmt == "avi" and codec not in INTRA_ONLY:
        # AVI stores no presentation times: FFmpeg numbers packets in decode order, so with
        # B-frames (MPEG-4 Part 2, packed or not) sorted "pts" are not display order
        from dataclasses import replace

        got = replace(got, usable=False, why="AVI stores no presentation times")
    return got
