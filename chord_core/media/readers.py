"""Frame readers: one interface, three implementations, chosen automatically.

:class:`FrameReader` is what a job's read goes through. In the order tried (``CHORD_READER``
``auto``, the default):

1. ``nvdec`` — NVIDIA's hardware decoder through PyNvVideoCodec, several decoder sessions
   per GPU in threads, frames resized on the GPU (:mod:`chord_core.media.nvdec`); needs the
   package, a GPU, and a stream NVDEC decodes (H.264/HEVC/VP9/AV1 8-bit 4:2:0, even sizes);
2. ``cpu-pool`` — keyframe-to-keyframe reading (:mod:`chord_core.media.gop`), the GOPs split
   over a pool of CPU decode processes (PyAV), each with FFmpeg's frame threads; needs PyAV
   and a packet index that proves frame indices (:mod:`chord_core.media.packet_index`);
3. ``default`` — the front-to-back reader (``video.read_frames_timed``: PyAV, else OpenCV).

A reader that cannot take a file says why (:class:`ReaderUnavailable`) and the next one
reads it; the one-line ``note`` of the :class:`FrameRead` says which reader ran and why the
faster ones did not. A reader that fails mid-way (:class:`ReaderFailed`: a decode error, a
frame it cannot place) hands the whole read to the next one, never half a result. Times
are each frame's own pts, seconds from frame 0 (the stream's start time and edit list
cancel out), as in the probe's timeline. A truncated file gives the frames before the
damage, and ``stopped_at`` says at which wanted frame it stopped.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from chord_core.errors import VideoError
from chord_core.media.reader_types import (
    FrameRead,
    ReaderFailed,
    ReaderUnavailable,
    ReadRequest,
    inside,
    usable_index,
)

__all__ = ["FrameRead", "FrameReader", "ReadRequest", "ReaderFailed", "ReaderUnavailable",
           "read_frames_auto", "reader_chain", "reader_line", "usable_index"]

log = logging.getLogger(__name__)

READER_NAMES = ("nvdec", "cpu-pool", "default")
POOL_MIN_COST = 240  # frames to decode before the work is spread over processes
SEEK_COST = 16  # a seek and a decoder flush, counted as frames
FAST_NOTE = ("fast decode (CHORD_DECODE=fast): B-frames not sampled and the loop filter "
             "skipped, frames near the exact ones")


class FrameReader(Protocol):
    """A way of reading a plan's frames (see module docstring)."""

    name: str

    def read(self, req: ReadRequest) -> FrameRead:
        ...


class DefaultReader:
    """Front to back: ``video.read_frames_timed`` (PyAV with OpenCV as its fallback)."""

    name = "default"

    def read(self, req: ReadRequest) -> FrameRead:
        from chord_core.media.video import read_frames_timed

        frames, read, times = read_frames_timed(req.info.path, req.indices, req.size_wh,
                                                on_progress=req.on_progress,
                                                cancel=req.cancel)
        stopped = req.indices[len(read)] if len(read) < len(req.indices) else None
        return FrameRead(frames, tuple(read), tuple(times), self.name, stopped_at=stopped)


class CpuPoolReader:
    """Keyframe to keyframe on the CPU, GOPs spread over decode processes (see module
    docstring); small reads (under ``POOL_MIN_COST`` frames to decode) stay in-process."""

    name = "cpu-pool"

    def __init__(self, procs: int | None = None, *,
                 decoder_factory: Callable[[str], Any] | None = None,
                 fast: bool | None = None, threads_only: bool | None = None) -> None:
        self.procs = procs
        self.decoder_factory = decoder_factory  # tests: a fake decoder, in-process
        self.fast = fast  # the decoder's shortcuts (None: CHORD_DECODE)
        self.threads_only = threads_only  # the parts on threads (None: in a worker)

    def read(self, req: ReadRequest) -> FrameRead:
        from chord_core.media.reader_settings import decode_mode, decode_procs
        from chord_core.media import decode_pool
        from chord_core.media.gop import plan_gops
        from chord_core.media.gop_reader import GopFailed

        index = usable_index(req.info)
        reads = plan_gops(inside(req.indices, index), index.keyframes)
        procs = self.procs or decode_procs()
        fast = decode_mode() == "fast" if self.fast is None else self.fast
        if sum(max(r.cost, SEEK_COST) for r in reads) < POOL_MIN_COST:
            procs = 1
        try:
            if self.decoder_factory is not None:
                from chord_core.media.gop_reader import read_gops

                out = read_gops(self.decoder_factory(req.info.path), index.pts, reads,
                                req.size_wh, req.info.rotation, req.cancel)
            else:
                out = decode_pool.run(req.info.path, index.pts, reads, req.size_wh,
                                      req.info.rotation, procs, req.cancel, fast,
                                      self.threads_only)
        except GopFailed as exc:
            raise ReaderFailed(str(exc)) from exc
        except Exception as exc:  # noqa: BLE001 — PyAV's errors: the next reader tries
            if type(exc).__name__ == "JobCancelled":
                raise
            raise ReaderFailed(f"{type(exc).__name__}: {exc}") from exc
        got = _assemble(req, index, out, self.name, procs)
        got.stats["decode"] = "fast" if fast else "exact"
        if fast:
            got.note = FAST_NOTE
        return got


def _assemble(req: ReadRequest, index: Any, out: Any, name: str, procs: int) -> FrameRead:
    """Frames in plan order up to the first one missing, with their own times."""
    got: list[int] = []
    for k in req.indices:
        if k not in out.frames:
            break
        got.append(k)
    if not got:
        raise ReaderFailed("no wanted frame decoded")
    stopped = req.indices[len(got)] if len(got) < len(req.indices) else None
    frames = np.stack([out.frames[k] for k in got])
    times = tuple(round(float((out.pts[k] - index.pts[0]) * index.time_base), 6) for k in got)
    if req.on_progress is not None:
        req.on_progress(len(got), len(req.indices))
    return FrameRead(frames, tuple(got), times, name, stopped_at=stopped,
                     stats={"decoded": out.decoded, "seeks": out.seeks, "procs": procs})


def reader_chain(prefer: str | None = None) -> list[FrameReader]:
    """Readers to try, in order, for ``prefer`` (``CHORD_READER`` when None)."""
    from chord_core.media.reader_settings import reader_choice

    choice = prefer or reader_choice()
    if choice not in ("auto",) + READER_NAMES:
        raise ValueError(f"unknown reader {choice!r}: use auto, {', '.join(READER_NAMES)}")
    names = list(READER_NAMES) if choice == "auto" else \
        list(READER_NAMES[READER_NAMES.index(choice):])
    made: list[FrameReader] = []
    for name in names:
        if name == "nvdec":
            from chord_core.media.nvdec import shared_reader

            made.append(shared_reader())  # its sessions outlive the read
        elif name == "cpu-pool":
            made.append(CpuPoolReader())
        else:
            made.append(DefaultReader())
    return made


def read_frames_auto(req: ReadRequest, chain: Sequence[FrameReader] | None = None
                     ) -> FrameRead:
    """Read with the first reader of ``chain`` (default :func:`reader_chain`) that can;
    the result's note says which ran and why any before it did not."""
    chain = list(chain) if chain is not None else reader_chain()
    skipped: list[str] = []
    last: Exception | None = None
    for reader in chain:
        try:
            got = reader.read(req)
        except ReaderUnavailable as why:
            skipped.append(f"{reader.name} not used: {why}")
            continue
        except ReaderFailed as why:
            log.info("%s: the %s reader failed (%s); trying the next", req.info.path,
                     reader.name, why)
            skipped.append(f"{reader.name} failed: {why}")
            last = why
            continue
        own = [got.note] if got.note else []  # what the reader said of its read
        got.note = "; ".join([f"read by {got.reader}", *own, *skipped])
        return got
    raise VideoError(f"no reader could read {req.info.path}: {'; '.join(skipped)}",
                     hint="check that the file plays; re-encode it, e.g. "
                          "`ffmpeg -i in.ext -c:v libx264 out.mp4`") from last


def reader_line(reads: Sequence[tuple[str, str]]) -> str:
    """The one line a command prints on stderr about its reads ((reader, note) per result:
    ``sampling.reader`` and ``sampling.reader_note``): which reader ran and why a faster one
    did not, e.g. ``reader: cpu-pool (nvdec not used: no CUDA GPU here)``. A long run's jobs
    may differ: each reader is counted, the note is the most used reader's."""
    from collections import Counter

    got = [(r, n) for r, n in reads if r]
    if not got:
        return "reader: none (nothing was decoded: the result was read back from the store)"
    counts = Counter(r for r, _ in got).most_common()
    main = counts[0][0]
    why = Counter(_skipped(n) for r, n in got if r == main).most_common(1)[0][0]
    head = main if len(counts) == 1 else ", ".join(
        f"{r} for {k} of {len(got)} reads" for r, k in counts)
    return f"reader: {head}" + (f" ({why})" if why else "")


def _skipped(note: str) -> str:
    """A read's note without its "read by X" part: why the readers before X were not used."""
    return "; ".join(p for p in note.split("; ") if p and not p.startswith("read by "))
