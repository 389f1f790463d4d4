"""A worker that ends while the manager shuts down did not die (issue 39: a clean stop logged
"worker died (exit code -15); restarting it"). The executor is a fake at its boundary: its
worker is ready at once and is reported gone with SIGTERM's exit code when the manager wakes
it; the manager, its crash policy and its logging are real."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from chord_core.config import ModelConfig
from chord_core.runtime.executors import Executor, WorkerHandle
from chord_core.runtime.manager import JobManager
from chord_core.runtime.messages import Event, Ready, WorkerDied
from chord_core.runtime.workers import WorkerSpec, cpu_specs

SIGTERM_EXIT = -15


class _Handle(WorkerHandle):
    """A worker with nothing behind it: stop and join succeed at once."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def run(self, tasks: list[Any], ahead: tuple[Any, ...] = ()) -> None: ...
    def cancel(self, task_id: str) -> None: ...
    def stop(self) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...

    def join(self, timeout: float) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        return None

    @property
    def exitcode(self) -> int | None:
        return SIGTERM_EXIT


class _SigtermOnWake(Executor):
    """Reports each started worker ready; once ``armed``, the next wake reports it gone with
    exit code -15 (what SIGTERM to the process group does to a worker)."""

    max_wait_s = None

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.starts = 0
        self._woken = threading.Event()
        self._pending: list[Event] = []
        self._lock = threading.Lock()

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        with self._lock:
            self.starts += 1
            self._pending.append(Ready(spec.worker_id, {"id": "test"}))
        return _Handle(spec.worker_id)

    def events(self, timeout: float | None) -> list[Event]:
        with self._lock:
            if self._pending:
                out, self._pending = self._pending, []
                return out
        self._woken.wait(30.0 if timeout is None else timeout)
        if self._woken.is_set() and self.armed.is_set():
            self.armed.clear()
            self._woken.clear()
            return [WorkerDied("cpu0", SIGTERM_EXIT)]
        self._woken.clear()
        return []

    def wake(self) -> None:
        self._woken.set()


def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize(("shutting_down", "noted", "restarts"), [
    (True, False, 1),   # the manager asked for the stop: an end, logged at INFO, no restart
    # the same SIGTERM with no shutdown asked (a stop sent to the whole process group reaches
    # the workers first): restarted after the back-off, said at INFO, no warning
    (False, True, 2),
], ids=["at-shutdown", "while-running"])
def test_exit_at_shutdown_is_not_a_death(caplog: pytest.LogCaptureFixture,
                                         shutting_down: bool, noted: bool,
                                         restarts: int) -> None:
    caplog.set_level(logging.INFO, logger="chord_core.runtime")
    ex = _SigtermOnWake()
    m = JobManager(cpu_specs(1, ModelConfig(model="test"), threads=1), executor=ex)
    try:
        m.wait_ready(10)
        ex.armed.set()
        if shutting_down:
            m.shutdown(timeout=2)
        else:
            ex.wake()
            _until(lambda: ex.starts == 2)  # restarted after the 0.5 s back-off
    finally:
        m.shutdown(timeout=2)
    sigterm = [r for r in caplog.records if "got SIGTERM; restarting it" in r.getMessage()]
    ended = [r for r in caplog.records if "ended with the shutdown (exit code -15)"
             in r.getMessage()]
    assert bool(sigterm) is noted and bool(ended) is shutting_down, caplog.text
    assert all(r.levelno == logging.INFO for r in ended + sigterm)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and "cpu0" in r.getMessage()], caplog.text
    assert ex.starts == restarts


@pytest.mark.parametrize(("exitcode", "level"), [(-15, logging.INFO), (143, logging.INFO),
                                                 (-9, logging.WARNING), (1, logging.WARNING)],
                         ids=["sigterm", "sigterm-own-exit", "killed", "crashed"])
def test_a_death_is_warned_unless_it_was_a_sigterm(caplog: pytest.LogCaptureFixture,
                                                   exitcode: int, level: int) -> None:
    """SIGTERM is how a group stop reaches a worker first; any other death is a crash."""
    from chord_core.runtime import crashes
    from chord_core.runtime.scheduling import WorkerSlot, WorkerState

    caplog.set_level(logging.INFO, logger="chord_core.runtime")
    slot = WorkerSlot(cpu_specs(1, ModelConfig(model="test"))[0], state=WorkerState.READY)
    assert crashes.count_death(slot, False, exitcode) is True  # restarted after a back-off
    assert slot.state == "restarting"
    (record,) = [r for r in caplog.records if "cpu0" in r.getMessage()]
    assert record.levelno == level
