"""Keyframe-to-keyframe reading on the CPU: the decoder boundary and the logic above it.

:class:`GopDecoder` is the boundary: given a keyframe's pts it yields decoded frames as
(pts, frame) from that keyframe on, and converts a frame to RGB at a size. :class:`AvGopDecoder`
is PyAV's (a container seek to the keyframe, the decoder flushed, FFmpeg's frame threads;
``keyframes_only`` asks the decoder to skip every other frame). The tests' fake decoder
stands in for it, so everything above — which frames each read needs, placing frames by
pts, a truncated file, a seek that lands wrong — is tested without FFmpeg.

:func:`read_gops` runs a list of :class:`~chord_core.media.gop.GopRead`: each wanted frame
is found by its pts from the packet index, so index k is the k-th frame in presentation
order, exactly as planned. A GOP that ends before its wanted frames, with no later frame
out, means the file ends there (truncated): reading stops and says where. A wanted frame
passed over (later frames came out without it) raises :class:`GopFailed`; the caller then
reads with the default reader.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence

import numpy as np

from chord_core.errors import JobCancelled
from chord_core.media.av_reader import NONREF_CODECS
from chord_core.media.gop import GopRead
from chord_core.media.probe import rotated_wh, upright

__all__ = ["AvGopDecoder", "GopDecoder", "GopFailed", "GopOut", "read_gops"]

log = logging.getLogger(__name__)


class GopFailed(Exception):
    """Keyframe-to-keyframe reading cannot vouch for a frame: read it another way."""


class GopDecoder(Protocol):
    """The decoder boundary of keyframe-to-keyframe reading (see module docstring)."""

    def frames_from(self, key_pts: int, keyframes_only: bool,
                    wanted_pts: frozenset[int] = frozenset()
                    ) -> Iterator[tuple[int | None, Any]]:
        ...

    def convert(self, frame: Any, size_wh: tuple[int, int] | None, rotation: int) -> np.ndarray:
        ...

    def close(self) -> None:
        ...


@dataclass
class GopOut:
    """What :func:`read_gops` got: frames by index, their pts, where it stopped, counts."""

    frames: dict[int, np.ndarray] = field(default_factory=dict)
    pts: dict[int, int] = field(default_factory=dict)
    stopped_at: int | None = None  # first wanted frame the file did not give (truncated)
    decoded: int = 0  # frames out of the decoder
    seeks: int = 0


def read_gops(decoder: GopDecoder, pts_of: Sequence[int], reads: Sequence[GopRead],
              size_wh: tuple[int, int] | None, rotation: int,
              cancel: threading.Event | None = None) -> GopOut:
    """Decode ``reads`` in order (see module docstring); ``pts_of[k]`` is frame k's pts."""
    out = GopOut()
    for read in reads:
        if cancel is not None and cancel.is_set():
            raise JobCancelled("reading video frames was cancelled", hint="start the job again")
        if not _one_read(decoder, pts_of, read, size_wh, rotation, out):
            break
    return out


def _one_read(decoder: GopDecoder, pts_of: Sequence[int], read: GopRead,
              size_wh: tuple[int, int] | None, rotation: int, out: GopOut) -> bool:
    """One GOP; False when the file ended in it (``out.stopped_at`` set)."""
    want = {pts_of[k]: k for k in read.wanted}
    last = pts_of[read.wanted[-1]]
    past = False  # a frame after the last wanted one came out
    prev: int | None = None
    out.seeks += 1
    frames = decoder.frames_from(pts_of[read.key], read.keyframe_only, frozenset(want))
    try:
        for pts, frame in frames:
            out.decoded += 1
            if pts is not None and prev is not None and pts <= prev:
                raise GopFailed(f"decoded frames are out of order (pts {pts} after {prev})")
            prev = pts if pts is not None else prev
            k = want.pop(pts, None) if pts is not None else None
            if k is not None:
                out.frames[k] = decoder.convert(frame, size_wh, rotation)
                out.pts[k] = int(pts)
            if not want:
                break
            if pts is not None and pts > last:
                past = True
                break
    finally:
        close = getattr(frames, "close", None)
        if close is not None:
            close()
    if not want:
        return True
    first = min(want.values())
    if past:
        raise GopFailed(f"frame {first} (pts {pts_of[first]}) was not output by decoding from "
                        f"keyframe {read.key}")
    out.stopped_at = first
    return False


def _threads() -> int:
    try:
        return max(1, min(16, len(os.sched_getaffinity(0))))
    except AttributeError:
        return max(1, min(16, os.cpu_count() or 1))


class AvGopDecoder:
    """PyAV: seek to a keyframe, flush, decode forward (the real :class:`GopDecoder`).
    ``skip_unwanted``: FFmpeg's ``skip_frame`` for packets of frames not wanted (``NONREF``:
    exact). ``fast`` (``CHORD_DECODE=fast``) takes ``BIDIR`` instead, where a P-frame may
    refer to a skipped B-frame, and skips H.264's loop filter: frames near the exact ones,
    not equal (``benchmarks/sampling.py`` measures the saving and the pixel error)."""

    skip_unwanted = "NONREF"

    def __init__(self, name: str, threads: int = 0, slice_only: bool = False,
                 fast: bool = False) -> None:
        import av

        self.av = av
        self.box = av.open(name)
        if not self.box.streams.video:
            self.box.close()
            raise GopFailed("no video stream")
        self.stream = self.box.streams.video[0]
        # frame threads hold frames back (a seek then waits for the pipeline to fill):
        # reads of keyframes alone use slice threads, each frame out as its packet goes in
        self.stream.thread_type = "SLICE" if slice_only else "AUTO"
        self.stream.codec_context.thread_count = threads or _threads()
        self.ctx = self.stream.codec_context
        if fast:
            self.skip_unwanted = "BIDIR"
            self.ctx.options = {"skip_loop_filter": "all"}  # taken when the codec opens

    def frames_from(self, key_pts: int, keyframes_only: bool,
                    wanted_pts: frozenset[int] = frozenset()
                    ) -> Iterator[tuple[int | None, Any]]:
        """Frames from the keyframe at ``key_pts`` on; packets of frames not in
        ``wanted_pts`` are decoded with ``skip_frame="NONREF"`` (frames nothing refers to
        are skipped: the codecs of ``av_reader.NONREF_CODECS``)."""
        av = self.av
        self.box.seek(key_pts, stream=self.stream, backward=True, any_frame=False)
        self.ctx.flush_buffers()
        skip_other = "NONKEY" if keyframes_only else \
            self.skip_unwanted if wanted_pts and self.ctx.name in NONREF_CODECS else "DEFAULT"
        current = None
        try:
            for packet in self.box.demux(self.stream):
                skip = "DEFAULT" if packet.pts in wanted_pts and not keyframes_only \
                    else skip_other
                if skip != current:
                    self.ctx.skip_frame = current = skip
                try:
                    frames = packet.decode()
                except av.error.InvalidDataError:  # a damaged packet: the next may decode
                    continue
                for frame in frames:
                    yield frame.pts, frame
        except (av.error.EOFError, av.error.InvalidDataError) as exc:  # truncated
            log.info("demuxing stopped: %s", exc)
        try:  # what the decoder still holds (the end of a truncated file)
            for frame in self.ctx.decode(None):
                yield frame.pts, frame
        except av.error.FFmpegError:
            pass

    def convert(self, frame: Any, size_wh: tuple[int, int] | None, rotation: int) -> np.ndarray:
        if size_wh is None:
            rgb = frame.to_ndarray(format="rgb24")
        else:
            w, h = rotated_wh(size_wh, rotation)
            rgb = frame.to_ndarray(width=int(w), height=int(h), format="rgb24",
                                   interpolation="AREA")
        return upright(rgb, rotation)

    def close(self) -> None:
        self.box.close()
