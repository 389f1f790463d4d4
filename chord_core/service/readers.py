"""Reader processes: where the service reads heavy request bodies, beside its dispatcher.

A ``/batch_predict`` request of 64 images of 448×448 is ≈ 51 MB of JSON. Parsing it,
decoding the base64, checking every image and storing it costs ≈ 13 ms a task on one core,
and in the service process that work holds the interpreter lock that the manager's
dispatcher thread needs to hand the workers their next batch. Now the service process only
writes the body, as it arrives, to a private spool file (``spool_body``: it is never whole
in this process's memory, and nothing big is pickled), and a small pool of spawned
processes reads it; the jobs that come back are queued. Measured: the service process's CPU
per such request 1.02 s → 0.29 s (CPU machine), 2–3 % more pairs/s on one H200
(``docs/benchmarks.md``, issue 13's fourth round).

``Readers(0)`` reads on the service's own threads (``create_app`` given no readers).
A reader that dies (killed, out of memory) costs only the request it was reading: that
request gets a 500 that says so, and the pool is renewed for the next.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, TypeVar

from starlette.concurrency import run_in_threadpool

from chord_core.runtime.lifeline import bind_to_parent
from chord_core.service.http_errors import ApiError

log = logging.getLogger(__name__)
T = TypeVar("T")
SPOOL_BUFFER = 1 << 20


async def spool_body(request: Any) -> Path:
    """The request's body, written as it arrives to a private file (0600) in the API's
    uploads folder; the caller removes it. The body limit counts it as it comes."""
    from chord_core.service.media import api_uploads_dir

    fd, name = tempfile.mkstemp(dir=api_uploads_dir(), prefix=".body-")
    try:
        with os.fdopen(fd, "wb", buffering=SPOOL_BUFFER) as fh:
            async for chunk in request.stream():
                fh.write(chunk)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _ready() -> int:
    return os.getpid()


class Readers:
    """A pool of ``processes`` spawned reader processes (0: threads of this process)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def start(self) -> "Readers":
        """Spawn the readers now (they import while the workers load), not on the first
        request."""
        if self.processes > 0 and self._pool is None:
            self._pool = self._new_pool()
        return self

    def _new_pool(self) -> ProcessPoolExecutor:
        # a reader dies with the service, however the service ends (lifeline.py)
        pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=bind_to_parent)
        for _ in range(self.processes):
            pool.submit(_ready)  # start each process and its imports
        return pool

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a reader (``fn`` and its arguments must pickle)."""
        pool = self._pool
        if pool is None:
            return await run_in_threadpool(fn, *args)
        try:
            return await asyncio.wrap_future(pool.submit(fn, *args))
        except BrokenProcessPool:
            self._renew(pool)
            raise ApiError(500, "the process reading this request stopped before it finished",
                           "send the request again; the server's log says why if it "
                           "happens again") from None

    def _renew(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                log.error("a request reader process died; starting %d new one(s)",
                          self.processes)
                broken.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new_pool()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
