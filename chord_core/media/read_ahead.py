"""Frames read ahead: the clips a worker expects next are decoded on one background thread
while the model runs the current task, so the GPU does not wait for the CPU between tasks.

The job manager sends each worker, with its tasks, the ones queued behind them
(``RunTasks.ahead``). They are a hint: a queued task may still be stolen by another worker,
cancelled, or never come. ``ReadAhead.expect`` replaces the list of expected reads (reads no
longer expected are dropped, a running one is stopped); ``take`` hands over a finished or
running read when its task arrives, and None when there is none, so the caller reads the
frames itself — and gets any error in its own task, never in the read-ahead.

A read is known by the file (path, size, modification time), the frame indices and the size
they are read at; a file changed since the hint is read again. What is held is bounded in
bytes (``max_bytes``; the first expected read is always allowed, as its task will hold its
frames anyway).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from chord_core.types import SamplingPlan, VideoInfo

if TYPE_CHECKING:
    import numpy as np

    from chord_core.media.readers import FrameRead

log = logging.getLogger(__name__)

READ_AHEAD_BYTES = 1 << 30  # frames held ahead at most (the first expected read always)


def read_plan(info: VideoInfo, plan: SamplingPlan, cancel: threading.Event | None = None,
              on_progress: Callable[[int, int], None] | None = None
              ) -> tuple[np.ndarray, tuple[int, ...], tuple[float, ...]]:
    """The plan's frames, or the image, at the plan's size: (frames, indices read, each
    frame's decoded time); see :func:`read_plan_full`."""
    got = read_plan_full(info, plan, cancel, on_progress)
    return got.frames, got.indices, got.times_s


def read_plan_full(info: VideoInfo, plan: SamplingPlan, cancel: threading.Event | None = None,
                   on_progress: Callable[[int, int], None] | None = None, *,
                   model_device: str | None = None) -> FrameRead:
    """The plan's frames through the reader chain (``media/readers.py``: NVDEC, the CPU
    decode pool, the default reader), or the image: which reader ran, and why, included.
    ``model_device``: where the model runs (a CUDA device), so a reader decoding there
    hands back a tensor on it (``ReadRequest.model_device``)."""
    from chord_core.media.images import read_image
    from chord_core.media.readers import FrameRead, ReadRequest, read_frames_auto

    if info.container == "image":
        return FrameRead(read_image(info.path, plan.input_wh), (0,), (0.0,), "image")
    return read_frames_auto(ReadRequest(info, tuple(plan.frame_indices), plan.input_wh,
                                        cancel=cancel, on_progress=on_progress,
                                        model_device=model_device))


def read_key(info: VideoInfo | None, plan: SamplingPlan | None) -> tuple | None:
    """What identifies one read, or None when there is none (a task not planned yet, or a
    file that cannot be looked at now)."""
    if info is None or plan is None:
        return None
    try:
        st = os.stat(info.path)
    except OSError:
        return None
    return (os.path.realpath(info.path), st.st_size, st.st_mtime_ns, info.container == "image",
            tuple(plan.frame_indices), tuple(plan.input_wh))


@dataclass
class _Read:
    key: tuple
    info: VideoInfo
    plan: SamplingPlan
    nbytes: int
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    out: tuple | None = None      # (FrameRead, seconds) once it succeeded
    started: bool = False
    taken: bool = False


class ReadAhead:
    """Expected reads, oldest first, ``streams`` at a time on daemon threads."""

    def __init__(self, *, max_bytes: int = READ_AHEAD_BYTES,
                 model_device: str | None = None, streams: int = 1) -> None:
        self.max_bytes = max_bytes
        self.model_device = model_device  # frames decoded there stay there (read_plan_full)
        # reads run at once: NVDEC's sessions take the next read's GOPs while this one's
        # last GOPs finish (``media/nvdec_sessions.py``), so the engine asks 2 on a GPU
        self.streams = streams
        self._cv = threading.Condition()
        self._expecting = threading.Lock()  # the worker's loop and its control thread
        self._reads: dict[tuple, _Read] = {}
        self._threads: list[threading.Thread] = []
        self.stats = {"expected": 0, "hits": 0, "waited_s": 0.0, "read_s": 0.0, "dropped": 0}

    def expect(self, items: Sequence[tuple[VideoInfo | None, SamplingPlan | None]], *,
               now: Sequence[tuple[VideoInfo | None, SamplingPlan | None]] = ()) -> None:
        """The reads the next tasks will want, in the order they will want them. ``now``:
        the tasks about to take theirs (kept when expected before, never started here)."""
        with self._expecting:
            self._expect(items, now)

    def _expect(self, items: Sequence[tuple[VideoInfo | None, SamplingPlan | None]],
                now: Sequence[tuple[VideoInfo | None, SamplingPlan | None]]) -> None:
        wanted: list[_Read] = []
        total = 0
        with self._cv:
            for info, plan in now:
                key = read_key(info, plan)
                if key in self._reads:
                    wanted.append(self._reads[key])
                    total += self._reads[key].nbytes
        for info, plan in items:
            key = read_key(info, plan)
            if key is None or any(r.key == key for r in wanted):
                continue
            w, h = plan.input_wh
            nbytes = max(1, plan.num_frames) * w * h * 3
            if wanted and total + nbytes > self.max_bytes:
                break
            total += nbytes
            wanted.append(_Read(key, info, plan, nbytes))
        with self._cv:
            keep = {r.key for r in wanted}
            for key in [k for k in self._reads if k not in keep]:
                self._drop(key)
            for r in wanted:  # (one taken meanwhile by its task is not read again)
                if r.key not in self._reads and not r.taken:
                    self._reads[r.key] = r
                    self.stats["expected"] += 1
            waiting = sum(1 for r in self._reads.values() if not r.started)
            while waiting and len(self._threads) < max(1, self.streams):
                self._threads.append(threading.Thread(
                    target=self._loop, daemon=True,
                    name=f"chord-read-ahead-{len(self._threads)}"))
                self._threads[-1].start()
                waiting -= 1
            self._cv.notify_all()

    def take(self, info: VideoInfo, plan: SamplingPlan,
             cancel: threading.Event | None = None) -> tuple | None:
        """(frames, read, decoded, seconds waited) of an expected read, waiting for it if
        it is running; None when it was not expected, failed, or ``cancel`` was set."""
        got = self.take_full(info, plan, cancel)
        if got is None:
            return None
        fr, waited = got
        return fr.frames, fr.indices, fr.times_s, waited

    def take_full(self, info: VideoInfo, plan: SamplingPlan,
                  cancel: threading.Event | None = None) -> tuple[FrameRead, float] | None:
        """(the read, seconds waited) of an expected read; see :meth:`take`."""
        key = read_key(info, plan)
        with self._cv:
            r = self._reads.pop(key, None)
            if r is None or not r.started:  # not begun: the task reads it itself, now
                return None
            r.taken = True
        t = time.perf_counter()
        while not r.done.wait(0.05):
            if cancel is not None and cancel.is_set():
                r.cancel.set()
                return None
        waited = time.perf_counter() - t
        if r.out is None:
            return None
        self.stats["hits"] += 1
        self.stats["waited_s"] += waited
        return r.out[0], waited

    def idle(self) -> bool:
        """Every expected read has finished (or failed)."""
        with self._cv:
            return all(r.done.is_set() for r in self._reads.values())

    def _drop(self, key: tuple) -> None:
        r = self._reads.pop(key)
        r.cancel.set()
        self.stats["dropped"] += 1

    def _next(self) -> _Read:
        with self._cv:
            while True:
                r = next((r for r in self._reads.values() if not r.started), None)
                if r is not None:
                    r.started = True
                    return r
                self._cv.wait()

    def _loop(self) -> None:
        while True:
            r = self._next()
            t = time.perf_counter()
            try:
                r.out = (read_plan_full(r.info, r.plan, r.cancel,
                                        model_device=self.model_device),
                         time.perf_counter() - t)
                self.stats["read_s"] += r.out[1]
            except Exception as exc:  # noqa: BLE001 — the task's own read reports it
                log.debug("read-ahead of %s failed: %s", r.info.path, exc)
            finally:
                r.done.set()
                with self._cv:  # a read nobody will take lets go of its frames
                    if not r.taken and self._reads.get(r.key) is not r:
                        r.out = None
