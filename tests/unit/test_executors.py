"""Executors: what a worker says arrives typed and in order, and its death is told after its
last words, through real spawned processes (ProcessExecutor) and threads (ThreadExecutor).

The workers here are small functions with the worker entry point's signature, not models."""

from __future__ import annotations

import os
import time

import pytest

from chord_core.config import ModelConfig
from chord_core.runtime.executors import ProcessExecutor
from chord_core.runtime.messages import (
    Done,
    Ready,
    RunTasks,
    Started,
    Stopped,
    StopWorker,
    WorkerDied,
)
from chord_core.runtime.workers import WorkerSpec

SPEC = WorkerSpec("w0", (), ModelConfig(model="test"))


def say_then_exit(spec, inbox, outbox, control) -> None:
    """Ready, one Done, then the process ends with code 3 without a Stopped."""
    outbox.put(Ready(spec.worker_id, {"id": "x"}))
    outbox.put(Done(spec.worker_id, "t0", {"big": "x" * 200_000}, 0.5))
    os._exit(3)


def obey(spec, inbox, outbox, control) -> None:
    """Ready, then answers each RunTasks with Started and stops on StopWorker."""
    outbox.put(Ready(spec.worker_id, {"id": "x"}))
    while True:
        msg = inbox.get()
        if isinstance(msg, StopWorker):
            outbox.put(Stopped(spec.worker_id))
            return
        for task in msg.tasks:
            outbox.put(Started(spec.worker_id, task))


def _collect(executor, until, timeout_s: float = 60.0) -> list:
    seen: list = []
    deadline = time.monotonic() + timeout_s
    while not until(seen):
        assert time.monotonic() < deadline, f"gave up waiting; seen {seen}"
        seen.extend(executor.events(timeout=1.0))
    return seen


def test_last_words_come_before_the_death():
    ex = ProcessExecutor(target=say_then_exit)
    ex.start(SPEC)
    seen = _collect(ex, lambda s: any(isinstance(m, WorkerDied) for m in s))
    assert [type(m) for m in seen] == [Ready, Done, WorkerDied]
    assert seen[1].payload["big"] == "x" * 200_000  # more than a pipe buffer holds
    assert seen[2] == WorkerDied("w0", 3)
    assert ex.events(timeout=0.2) == []  # told once


def test_kill_is_seen_and_stop_is_not_a_death():
    ex = ProcessExecutor(target=obey)
    handle = ex.start(SPEC)
    _collect(ex, lambda s: any(isinstance(m, Ready) for m in s))
    handle.run(["a", "b"])
    seen = _collect(ex, lambda s: len(s) >= 2)
    assert seen == [Started("w0", "a"), Started("w0", "b")]
    handle.kill()
    seen = _collect(ex, lambda s: any(isinstance(m, WorkerDied) for m in s))
    assert seen[-1].exitcode == -9 and handle.exitcode == -9

    ex2 = ProcessExecutor(target=obey)
    h2 = ex2.start(SPEC)
    h2.stop()
    seen = _collect(ex2, lambda s: any(isinstance(m, Stopped) for m in s))
    assert h2.join(30)
    time.sleep(0.2)
    assert not any(isinstance(m, WorkerDied) for m in seen + ex2.events(timeout=0.5))


def test_messages_are_plain_picklable_records():
    import pickle

    msg = RunTasks(("t",))
    assert pickle.loads(pickle.dumps(msg)) == msg
    with pytest.raises(AttributeError):
        msg.tasks = ()  # frozen


def test_a_thread_worker_is_joined_once_its_os_thread_is_gone(monkeypatch, tmp_path) -> None:
    """A thread's native teardown (torch's thread-locals) runs after ``Thread.join`` returns;
    a process finalizing meanwhile aborted (``search --check`` exited -6 under load). The
    handle's join waits for the OS thread's entry to go. The boundary is faked: a stand-in
    ``/proc/self/task`` whose entry for the thread goes 0.3 s after the thread ends."""
    import queue
    import threading

    from chord_core import threads
    from chord_core.runtime import executors

    monkeypatch.setattr(threads, "_TASKS", tmp_path)
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    entry = tmp_path / str(thread.native_id)
    entry.touch()  # the OS thread, still tearing down
    threading.Timer(0.3, entry.unlink).start()
    handle = executors._ThreadHandle("t0", thread, queue.Queue(), queue.Queue())
    t0 = time.monotonic()
    assert handle.join(5.0)
    assert not entry.exists() and time.monotonic() - t0 >= 0.25
    # one that never goes is waited for at most the bound
    entry.touch()
    t0 = time.monotonic()
    threads.native_end(thread, timeout=0.2)
    assert entry.exists() and time.monotonic() - t0 < 2.0


def test_a_thread_that_says_it_ended_is_let_go_once_its_os_thread_is_gone(monkeypatch,
                                                                          tmp_path) -> None:
    """The dispatcher hears ``_Ended`` and drops the thread's handle, so shutdown's join never
    sees it: that path waits for the native teardown too (``ask`` exited -6 under load after
    printing its answer). The same stand-in ``/proc/self/task`` as above."""
    import queue
    import threading

    from chord_core import threads
    from chord_core.runtime import executors

    monkeypatch.setattr(threads, "_TASKS", tmp_path)
    ex = executors.ThreadExecutor()
    thread = threading.Thread(target=lambda: ex._outbox.put(executors._Ended("w0")))
    ex._handles.append(executors._ThreadHandle("w0", thread, queue.Queue(), queue.Queue()))
    thread.start()
    thread.join()
    entry = tmp_path / str(thread.native_id)
    entry.touch()  # the OS thread, still tearing down
    threading.Timer(0.3, entry.unlink).start()
    t0 = time.monotonic()
    out = ex.events(1.0)
    assert not entry.exists() and time.monotonic() - t0 >= 0.25
    assert ex._handles == [] and [type(m).__name__ for m in out] == ["WorkerDied"]
