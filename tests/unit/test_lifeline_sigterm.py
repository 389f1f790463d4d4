"""A worker process ended by SIGTERM (a stop sent to the whole process group: systemd,
``docker stop``, ``timeout``) exits through Python's own shutdown, status 143, so what it
registered is released: killed outright, it left its semaphores to the resource tracker,
which warned of "leaked semaphore objects" at every such stop (issue 39). A real spawned
process, bound to this one as a worker is."""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path


def _child(ready: object, marker: str) -> None:
    import atexit
    import time

    from chord_core.runtime.lifeline import bind_to_parent

    bind_to_parent()
    lock = multiprocessing.get_context("spawn").Lock()  # a semaphore the tracker follows
    atexit.register(lambda: Path(marker).write_text("released"))
    ready.set()  # type: ignore[attr-defined]
    with lock:
        while True:
            time.sleep(0.05)


def test_sigterm_ends_a_worker_through_its_own_exit(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, marker = ctx.Event(), tmp_path / "exit.txt"
    proc = ctx.Process(target=_child, args=(ready, str(marker)))
    proc.start()
    try:
        assert ready.wait(60), "the child did not start"
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(10)
    finally:
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 128 + signal.SIGTERM  # its own exit, not killed by the signal
    assert marker.read_text() == "released"  # the interpreter's shutdown ran

