"""Read sampled frames with PyAV (FFmpeg's libraries, threaded decoding): the fast route of
:func:`chord_core.media.video.read_frames`.

Frame index k means exactly what it means for the OpenCV route: the k-th frame the decoder
outputs (presentation order), counted from the start of the first video stream. Only wanted
frames are converted, in one swscale pass straight to the target size, then turned upright.

The file is demuxed front to back (no container seeks). Reading starts in *count mode*: every
packet is decoded and output frames are counted, as OpenCV does. It switches to *timestamp
mode* only when frame indices are provable from timestamps:

* the stream states a frame rate, so frame k should have pts ``pts0 + k·step``;
* the first ``EVIDENCE_FRAMES`` decoded frames are on that grid (count == pts index);
* every packet demuxed so far is on the grid and the packets' indices are exactly 0, 1, 2, …
  (each once, gaps only inside a short reordering window) — the *census* (:class:`_Census`).

In timestamp mode an output frame's index is its pts index, so frames nobody wants need not be
decoded: non-reference frames are skipped by the decoder (``skip_frame="NONREF"``, for the
codecs in ``NONREF_CODECS``, where nothing refers to them), and across a long gap packets are
not decoded at all, only kept from the last keyframe on; near the next wanted frame the decoder
is flushed and fed from that keyframe. Every output is checked (on the grid, after the previous
one, no wanted frame passed); any failure — or the census breaking — restarts the read from
the start in count mode. The caller's ``allow_seek=False`` (clips probed as VFR) keeps count
mode throughout. Assumed, not checked: a packet on the grid decodes to exactly one frame, and
a keyframe packet is a point decoding can start from (as any seek assumes); a decoder error
makes PyAV raise instead, and the caller falls back to OpenCV.

Decoding stops after ``nb_frames + 1`` frames when the container states ``nb_frames``
(OpenCV's FFmpeg backend stops there too). PyAV problems (not installed, cannot open, decode
errors) raise :class:`AvFailed`; the caller then uses OpenCV.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from chord_core.errors import JobCancelled
from chord_core.media.confined import source
from chord_core.media.probe import rotated_wh, upright

__all__ = ["AvFailed", "AvMissing", "AvStats", "read_frames_av"]

log = logging.getLogger(__name__)

EVIDENCE_FRAMES = 8  # frames counted on the timestamp grid before timestamp mode
GRID_TOLERANCE = 0.25  # of a frame interval
CENSUS_WINDOW = 64  # packets that may arrive ahead of a missing one (B-frame reordering)
GAP_MIN = 96  # frames to the next wanted one before packets are kept instead of decoded
GAP_BACKOFF = 16  # restart from a keyframe at least this many frames before the wanted one
BUFFER_MAX = 1024  # kept packets; more are decoded instead (a rare, huge GOP) …
BUFFER_MAX_BYTES = 128 << 20  # … and so are more bytes than this
CANCEL_EVERY = 64  # packets between cancellation checks
MAX_THREADS = 16  # FFmpeg advises against more decoder threads
# Decoders whose skip_frame="NONREF" drops only frames no other frame refers to (H.264:
# nal_ref_idc 0; MPEG-1/2/4, H.263: B-frames; VP8/VP9: frames refreshing no reference slot).
# Not HEVC: its "sub-layer non-reference" pictures may be referenced by higher temporal layers.
NONREF_CODECS = frozenset({"h264", "mpeg1video", "mpeg2video", "mpeg4", "h263", "vp8", "vp9"})


class AvFailed(Exception):
    """PyAV cannot read this file (not installed, cannot open, decode error): use OpenCV."""


class AvMissing(AvFailed):
    """PyAV is not installed (every read falls back; said once per process)."""


class _Restart(Exception):
    """Timestamp mode could not prove an index: read again from the start, counting."""


@dataclass
class AvStats:
    """What a read did (for tests and benchmarks)."""

    packets: int = 0  # demuxed
    fed: int = 0  # sent to the decoder
    decoded: int = 0  # frames out of the decoder
    flushes: int = 0  # decoder restarts from a kept keyframe
    restarts: int = 0  # reads started again in count mode
    timestamp_mode: bool = False


@dataclass(frozen=True)
class _Grid:
    """Constant frame interval: frame k has pts ``pts0 + k·step`` (ticks, within tolerance)."""

    pts0: int
    step: float

    def index_of(self, pts: int | None) -> int | None:
        if pts is None:
            return None
        k = (pts - self.pts0) / self.step
        r = round(k)
        return r if abs(k - r) <= GRID_TOLERANCE else None


class _Census:
    """Whether the packets seen so far carry the indices 0, 1, 2, … each exactly once (up to a
    reordering window). Packets before frame 0 (negative index) are not counted."""

    def __init__(self) -> None:
        self.ok = True
        self.upto = 0  # every index below this was seen
        self.ahead: set[int] = set()

    def add(self, index: int | None) -> None:
        if not self.ok or (index is not None and index < 0):
            return
        if index is None or index < self.upto or index in self.ahead:
            self.ok = False  # off the grid, or a duplicate
            return
        self.ahead.add(index)
        while self.upto in self.ahead:
            self.ahead.discard(self.upto)
            self.upto += 1
        if len(self.ahead) > CENSUS_WINDOW:
            self.ok = False  # a hole: some index never came


def _frame_step(stream: Any) -> float | None:
    """Ticks (stream time base) per frame from the frame rate FFmpeg reads off the stream's
    timestamps (else the average rate); None if unknown."""
    rate, tb = stream.guessed_rate or stream.average_rate, stream.time_base
    if not rate or not tb or rate <= 0:
        return None
    return float(1 / (Fraction(rate) * Fraction(tb)))


def _decoder_threads() -> int:
    """Twice the usable cores (+2): frames queue up in the decoder while this thread converts
    a wanted frame (FFmpeg's own default, cores + 1, measured ~10 % slower on 2 cores)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return min(MAX_THREADS, 2 * cores + 2)


class _AvCursor:
    """Front-to-back decoding of the first video stream (module docstring: the two modes)."""

    def __init__(self, p: Path, wanted: tuple[int, ...], timestamps: bool,
                 cancel: threading.Event | None, stats: AvStats) -> None:
        import av

        self.cancel, self.stats, self.wanted = cancel, stats, set(wanted)
        with source(p) as src:
            self.container = av.open(src)
        if not self.container.streams.video:
            self.container.close()
            raise AvFailed("PyAV finds no video stream")
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        self.stream.codec_context.thread_count = _decoder_threads()
        self.ctx = self.stream.codec_context
        self.nonref_ok = self.ctx.codec.name in NONREF_CODECS
        n = self.stream.frames
        self.limit = n + 1 if n and n > 0 else None
        self.step = _frame_step(self.stream) if timestamps else None
        self.packets: Iterator[Any] = self.container.demux(self.stream)
        self.outputs: deque[Any] = deque()
        self.grid: _Grid | None = None
        self.census = _Census()
        self.early: list[Any] = []  # packets' pts before the grid is known
        self.ts_mode = False
        self.next = 0  # index of the next frame (count mode) / after the last output
        self.target = 0  # the wanted index being looked for
        self.kept: list[Any] = []  # packets held back across a gap
        self.kept_bytes = 0
        self.kept_from_key = False  # kept[0] is a keyframe: flush the decoder before feeding
        self.drop_below = 0  # after a flush, outputs before the keyframe are leading junk
        self.skip = "DEFAULT"
        self.rotation: int | None = None
        self.pts0: int | None = None  # frame 0's pts: times are counted from it
        self.last_pts: int | None = None
        self.disorder: tuple[int, int, int] | None = None  # (pts before, pts, index): first

    def close(self) -> None:
        self.container.close()

    # -- packets in ---------------------------------------------------------------------

    def _pull(self) -> bool:
        """Demux one packet and route it; False at the end of the file."""
        packet = next(self.packets, None)
        if packet is None:
            self._feed_kept()
            return False
        self.stats.packets += 1
        if self.cancel is not None and self.stats.packets % CANCEL_EVERY == 0 \
                and self.cancel.is_set():
            raise JobCancelled("reading video frames was cancelled", hint="start the job again")
        index = self._count_packet(packet)
        if self.ts_mode and packet.size and not packet.is_discard:
            self._route(packet, index)
        else:  # count mode, a packet the decoder drops anyway, or the final flush
            self._feed_kept()
            self._feed(packet, index)
        return True

    def _count_packet(self, packet: Any) -> int | None:
        """The packet's index on the grid (None: unknown), added to the census."""
        if packet.size == 0 or packet.is_discard or self.step is None:
            return None
        if self.grid is None:
            self.early.append(packet.pts)
            return None
        index = self.grid.index_of(packet.pts)
        self.census.add(index)
        if self.ts_mode and not self.census.ok:
            raise _Restart(f"packet with pts {packet.pts} breaks the frame grid")
        return index

    def _route(self, packet: Any, index: int | None) -> None:
        """Timestamp mode: decode now, or keep for later across a long gap."""
        land = self.target - GAP_BACKOFF
        if index is None:
            raise _Restart("a packet has no timestamp on the frame grid")
        if not self.kept and self.target - index <= GAP_MIN:
            self._feed(packet, index)
            return
        if packet.is_keyframe and index <= land:
            self.kept, self.kept_bytes, self.kept_from_key = [], 0, True
        self.kept.append(packet)
        self.kept_bytes += packet.size
        if index >= land or len(self.kept) > BUFFER_MAX or self.kept_bytes > BUFFER_MAX_BYTES:
            self._feed_kept()

    def _feed_kept(self) -> None:
        if not self.kept:
            return
        if self.kept_from_key:
            self.ctx.flush_buffers()
            self.outputs.clear()
            self.stats.flushes += 1
            self.drop_below = self.grid.index_of(self.kept[0].pts) if self.grid else 0
        kept, self.kept, self.kept_bytes, self.kept_from_key = self.kept, [], 0, False
        for packet in kept:
            self._feed(packet, self.grid.index_of(packet.pts) if self.grid else None)

    def _feed(self, packet: Any, index: int | None) -> None:
        skip = "NONREF" if self.ts_mode and self.nonref_ok and index is not None \
            and index not in self.wanted else "DEFAULT"
        if skip != self.skip:
            self.ctx.skip_frame = self.skip = skip
        self.stats.fed += 1
        self.outputs.extend(packet.decode())

    # -- frames out ---------------------------------------------------------------------

    def frame_at(self, index: int) -> Any:
        """The decoded frame ``index`` (> every index asked before); None when the stream
        ends first."""
        self.target = index
        while True:
            while not self.outputs:
                if not self._pull():
                    return self._at_end(index)
            frame = self.outputs.popleft()
            got = self._index_of(frame)
            if got is None:
                continue
            if self.limit is not None and got >= self.limit:
                return None
            if got == index:
                return frame

    def _index_of(self, frame: Any) -> int | None:
        """Index of an output frame; None for a frame to ignore. Raises _Restart when
        timestamp mode cannot vouch for it."""
        self.stats.decoded += 1
        if self.rotation is None:
            self.rotation = (-int(round(frame.rotation / 90.0)) * 90) % 360
        if not self.ts_mode:
            got = self.next
            self._collect_evidence(frame)
        else:
            got = self.grid.index_of(frame.pts) if self.grid else None
            if got is not None and got < self.drop_below:
                return None
            if got is None or got < self.next or not self.census.ok or got > self.target \
                    or (got == self.target and frame.is_corrupt):
                raise _Restart(f"frame with pts {frame.pts} cannot be placed (expected index "
                               f"{self.next}..{self.target})")
        if got == 0 and self.pts0 is None:
            self.pts0 = frame.pts
        self._check_order(frame.pts, got)
        self.next = got + 1
        return got

    def _check_order(self, pts: int | None, index: int) -> None:
        """Note the first output frame whose pts is not above the one before. Decoders output
        frames in display order, so such pts belong to other frames: MPEG-4 part 2 with packed
        B-frames in AVI (no pts stored) decodes as pts 1, 3, 2, 5, 4 … and a sampled subset
        can still look increasing (7 of 32 frames got a neighbour's time, ±42 ms)."""
        if pts is None:
            return
        if self.last_pts is not None and pts <= self.last_pts and self.disorder is None:
            self.disorder = (self.last_pts, pts, index)
        self.last_pts = pts

    def time_s(self, frame: Any) -> float:
        """A decoded frame's own presentation time, seconds from frame 0 (NaN: none)."""
        if frame.pts is None or self.pts0 is None or frame.time_base is None:
            return float("nan")
        return float((frame.pts - self.pts0) * frame.time_base)

    def _collect_evidence(self, frame: Any) -> None:
        """Count mode: check the frame against the grid; switch to timestamp mode when proven."""
        if self.step is None:
            return
        if self.grid is None:
            if self.next != 0 or frame.pts is None:
                self.step = None
                return
            self.grid = _Grid(int(frame.pts), self.step)
            for pts in self.early:
                self.census.add(self.grid.index_of(pts))
            self.early = []
        if self.grid.index_of(frame.pts) != self.next or not self.census.ok:
            self.step = None  # timestamps and counting disagree: count to the end
        elif self.next + 1 >= EVIDENCE_FRAMES:
            self.ts_mode = self.stats.timestamp_mode = True

    def _at_end(self, index: int) -> None:
        if self.ts_mode and index < self.census.upto:
            raise _Restart(f"frame {index} has a packet but was never decoded")
        return None


def _convert(frame: Any, size_wh: tuple[int, int] | None, rotation: int) -> np.ndarray:
    """Decoded frame (stored orientation) → RGB uint8 at displayed ``size_wh``, upright."""
    if size_wh is None:
        rgb = frame.to_ndarray(format="rgb24")
    else:
        w, h = rotated_wh(size_wh, rotation)
        rgb = frame.to_ndarray(width=int(w), height=int(h), format="rgb24",
                               interpolation="AREA")
    return upright(rgb, rotation)


def _read_once(p: Path, wanted: tuple[int, ...], size_wh: tuple[int, int] | None,
               rotation: int | None, on_progress: Callable[[int, int], None] | None,
               cancel: threading.Event | None, timestamps: bool, stats: AvStats,
               times_s: list[float]) -> tuple[list[np.ndarray], int]:
    cursor = _AvCursor(p, wanted, timestamps, cancel, stats)
    times_s.clear()
    frames: list[np.ndarray] = []
    try:
        for done, index in enumerate(wanted):
            if cancel is not None and cancel.is_set():
                raise JobCancelled("reading video frames was cancelled", hint="start the job again")
            frame = cursor.frame_at(index)
            if frame is None:
                break
            rot = cursor.rotation if rotation is None else int(rotation) % 360
            size = size_wh or (frames[0].shape[1::-1] if frames else None)
            frames.append(_convert(frame, size, rot or 0))
            times_s.append(cursor.time_s(frame))
            if on_progress is not None:
                on_progress(done + 1, len(wanted))
        if cursor.disorder is not None:  # none of these times can be trusted
            before, pts, index = cursor.disorder
            log.warning("%s: decoded frame times are not increasing (pts %d after %d at frame "
                        "%d, e.g. packed B-frames); using the probe's times instead", p.name,
                        pts, before, index)
            times_s[:] = [float("nan")] * len(times_s)
        return frames, cursor.next
    finally:
        cursor.close()


def read_frames_av(p: Path, wanted: tuple[int, ...], size_wh: tuple[int, int] | None = None,
                   *, rotation: int | None = None,
                   on_progress: Callable[[int, int], None] | None = None,
                   cancel: threading.Event | None = None, allow_seek: bool = True,
                   stats: AvStats | None = None, times_s: list[float] | None = None
                   ) -> tuple[list[np.ndarray], int]:
    """Decode frames ``wanted`` (strictly increasing) of ``p`` as RGB uint8 upright arrays,
    resized (area averaging) to the displayed ``size_wh`` = (w, h) when given. ``rotation``
    None: the file's display matrix (clockwise degrees, rounded to 90); an int overrides it.
    ``allow_seek`` False: count every frame (no timestamp mode), for clips probed as VFR.

    Returns (frames, index after the last frame decoded); the list is shorter than ``wanted``
    when the stream ends first. ``times_s``, when given, receives each returned frame's own
    presentation time (``frame.pts × time_base``, seconds from frame 0; NaN when it has
    none). Raises :class:`AvFailed` when PyAV cannot read the file and
    :class:`~chord_core.errors.JobCancelled` when ``cancel`` is set.
    """
    try:
        import av
    except ImportError as e:
        raise AvMissing(f"PyAV is not installed ({e})") from e
    stats = stats if stats is not None else AvStats()
    times_s = times_s if times_s is not None else []
    try:
        try:
            return _read_once(p, wanted, size_wh, rotation, on_progress, cancel, allow_seek,
                              stats, times_s)
        except _Restart as why:
            log.info("%s: %s; reading again from the start, counting every frame", p.name, why)
            stats.restarts += 1
            stats.timestamp_mode = False
            return _read_once(p, wanted, size_wh, rotation, on_progress, cancel, False, stats,
                              times_s)
    except av.error.FFmpegError as e:
        raise AvFailed(f"PyAV failed: {e}") from e
