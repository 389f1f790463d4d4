"""Threads that are gone when their join says so: the OS thread too, not only its Python part.

``Thread.join`` (and so ``ThreadPoolExecutor``'s ``with`` block) returns once CPython lets go
of a thread; the thread's native teardown runs after that. A thread that ran torch code can
hold Python objects in torch's thread-locals, and dropping them takes the GIL. A process that
finalizes meanwhile stops that thread inside C++ and aborts with "terminate called without an
active exception" (pytorch/pytorch#117762). Seen here twice on a loaded machine, each time
after the answer was printed: ``ask`` (a worker thread) and ``search --check`` (the
entailment's input thread, a pool thread; CI, exit -6).

CPython starts its threads detached, so there is no native join: ``native_end`` watches the
thread's ``/proc`` entry (Linux; where there is none it returns at once), at most a bound.
``Pool`` is a ``ThreadPoolExecutor`` whose ``shutdown(wait=True)`` — the end of its ``with``
block — waits for that too. Use it for a pool whose threads run torch or the processor.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["NATIVE_END_S", "Pool", "exit_now", "native_end"]

# at most this long: a thread's teardown is milliseconds when the machine is quiet; raised
# from 2 s when the abort recurred (2026-12-07, CI's slow tier, ``search --check``), though
# faulthandler then showed it in the interpreter's teardown, which ``exit_now`` skips
NATIVE_END_S = 10.0
_TASKS = Path("/proc/self/task")


def native_end(thread: threading.Thread, timeout: float = NATIVE_END_S) -> None:
    """Wait, at most ``timeout`` s, for ``thread``'s OS thread to be gone (call it after the
    Python join)."""
    tid = thread.native_id
    if tid is None or not _TASKS.is_dir():
        return
    entry = _TASKS / str(tid)
    deadline = time.monotonic() + timeout
    while entry.exists() and time.monotonic() < deadline:
        time.sleep(0.001)


class Pool(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose ``shutdown(wait=True)`` returns once its threads are gone
    from the OS as well (``native_end``). Its threads are noted by the pool's initializer, so
    it takes none of its own."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        self._started: list[threading.Thread] = []  # appended by each thread as it starts
        super().__init__(max_workers, thread_name_prefix, initializer=self._note)

    def _note(self) -> None:
        self._started.append(threading.current_thread())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait, cancel_futures=cancel_futures)
        if wait:  # every thread has ended (its Python part): none appends any more
            for thread in self._started:
                native_end(thread)


def exit_now(code: int | None) -> None:
    """Exit as Python does, less its last step. Threads are waited for, atexit handlers run
    (the decode pool, NVDEC) and the streams flushed; then the process ends without the
    interpreter's teardown, where torch's native teardown can abort a finished command
    with "terminate called without an active exception" (pytorch#117762, module
    docstring): CI's ``search --check`` did, twice on 2026-12-07, with only the main thread
    left and no Python frame."""
    import atexit
    import logging
    import os
    import sys

    shutdown = getattr(threading, "_shutdown", None)  # what finalizing calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    os._exit(int(code or 0))
