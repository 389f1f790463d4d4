"""The CPU decode pool: a read's GOPs split over decode processes (PyAV in each).

:func:`run` splits the reads (:func:`chord_core.media.gop.split_reads`, equal decoding cost,
clip order) over ``procs`` processes of one long-lived pool (``spawn``: no forked locks),
each decoding its part keyframe to keyframe with ``cores / procs`` FFmpeg threads; a single
part runs in this process. The pool is made on first use and kept for later reads (a
worker's reads no longer run on one thread); a crashed child resets it and the read fails
over to the next reader. A path confined to media roots (:mod:`chord_core.media.confined`)
is confined in the child too, so a child opens only what this process may open.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Sequence

from chord_core.errors import JobCancelled
from chord_core.media.gop import GopRead, split_reads
from chord_core.media.gop_reader import AvGopDecoder, GopOut, read_gops
from chord_core.threads import Pool

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_size = 0


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def decode_part(path: str, roots: tuple[str, ...] | None, pts_of: dict[int, int],
                reads: Sequence[GopRead], size_wh: tuple[int, int] | None, rotation: int,
                threads: int, cancel: threading.Event | None = None,
                fast: bool = False) -> GopOut:
    """One decoder's share: open the file (confined like the caller's), read the GOPs
    (``fast``: :class:`AvGopDecoder`'s shortcuts)."""
    from chord_core.media.confined import confine, source

    if roots is not None:
        confine(path, roots)
    with source(path) as name:  # keyframes alone: slice threads, each frame out at once
        decoder = AvGopDecoder(name, threads, slice_only=all(r.keyframe_only for r in reads),
                               fast=fast)
    try:
        return read_gops(decoder, pts_of, reads, size_wh, rotation, cancel)
    finally:
        decoder.close()


def _child_init() -> None:
    """A decode process: FFmpeg's own messages stay off the terminal, as in the parent."""
    from chord_core.media.native_logs import quiet_native_logs

    quiet_native_logs(log.getEffectiveLevel() <= logging.DEBUG)


def _get_pool(size: int) -> ProcessPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            import multiprocessing as mp

            _pool = ProcessPoolExecutor(max_workers=size, mp_context=mp.get_context("spawn"),
                                        initializer=_child_init)
            _pool_size = size
        return _pool


def _reset_pool() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


atexit.register(_reset_pool)


def run(path: str, pts: Sequence[int], reads: Sequence[GopRead],
        size_wh: tuple[int, int] | None, rotation: int, procs: int,
        cancel: threading.Event | None = None, fast: bool = False,
        threads_only: bool | None = None) -> GopOut:
    """Decode ``reads`` of ``path`` (``pts[k]``: frame k's pts) over ``procs`` processes
    (``fast``: each decoder takes :class:`AvGopDecoder`'s shortcuts). ``threads_only``:
    the parts run on threads of this process (None: where it may have no children)."""
    from chord_core.media.confined import roots_for

    roots = roots_for(path)
    parts = split_reads(reads, procs)
    threads = max(1, _cores() // max(1, len(parts)))
    if len(parts) <= 1:
        need = {k: pts[k] for r in reads for k in (r.key, *r.wanted)}
        return decode_part(path, roots, need, reads, size_wh, rotation, 0, cancel, fast)
    import multiprocessing as mp

    if threads_only or (threads_only is None and mp.current_process().daemon):
        # a worker process may have no children: threads
        # (PyAV decodes and scales without the GIL; measured on an H200, workers are daemonic)
        with Pool(len(parts), thread_name_prefix="chord-decode") as tp:
            futures = [tp.submit(decode_part, path, roots,
                                 {k: pts[k] for r in part for k in (r.key, *r.wanted)}, part,
                                 size_wh, rotation, threads, cancel, fast)
                       for part in parts]
            return _gather(futures, cancel)
    pool = _get_pool(procs)
    futures: list[Future] = []
    for part in parts:
        need = {k: pts[k] for r in part for k in (r.key, *r.wanted)}
        futures.append(pool.submit(decode_part, path, roots, need, part, size_wh, rotation,
                                   threads, None, fast))
    return _gather(futures, cancel)


def _gather(futures: list[Future], cancel: threading.Event | None) -> GopOut:
    from concurrent.futures.process import BrokenProcessPool

    merged = GopOut()
    try:
        for fut in futures:
            while True:
                if cancel is not None and cancel.is_set():
                    for f in futures:
                        f.cancel()
                    raise JobCancelled("reading video frames was cancelled",
                                       hint="start the job again")
                try:
                    part: Any = fut.result(timeout=0.1)
                    break
                except TimeoutError:
                    continue
            _merge(merged, part)
    except BrokenProcessPool:
        _reset_pool()
        raise
    return merged


def _merge(into: GopOut, part: GopOut) -> None:
    into.frames.update(part.frames)
    into.pts.update(part.pts)
    into.decoded += part.decoded
    into.seeks += part.seeks
    if part.stopped_at is not None:
        into.stopped_at = part.stopped_at if into.stopped_at is None \
            else min(into.stopped_at, part.stopped_at)
