"""Executors: where workers run. The job manager asks one to start a worker for a
``WorkerSpec`` and gets a handle back; it then reads every worker's messages, and every
worker's death, from the executor's ``events``.

* ``ProcessExecutor`` — one spawned process per worker on this machine (the app, the CLI's
  ``batch``, the service). Each worker writes to its own pipe; ``events`` waits on those
  pipes and on the processes' sentinels together, so a message or a death wakes the
  manager at once, and a worker's last messages are always read before its death is told.
* ``ThreadExecutor`` — workers as threads of this process (tests, tools, a CPU-only CLI):
  the same worker loop, no process set-up, no model isolation.
* ``RayExecutor`` (``ray_executor.py``) — workers as Ray actors across machines.

The dispatcher blocks in ``events`` until something happens: a worker's message or death,
or ``wake()`` from another thread (a submit, a cancel, a shutdown). It passes the time left
to its next timer (a restart's back-off, the lease's renewal) as the timeout, capped at the
executor's ``max_wait_s`` — None for the two executors here, which see every death as it
happens; Ray's cannot wait on its queue and its actors together (``ray_executor.py``).

The worker side of every executor is ``workers.serve``; what crosses is ``messages.py``.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import threading
import time
from abc import ABC, abstractmethod
from multiprocessing.connection import wait as wait_ready
from multiprocessing.process import BaseProcess
from typing import Any, Callable

from chord_core.runtime.messages import (
    CancelTask,
    Event,
    Expect,
    RunTasks,
    Stopped,
    StopWorker,
    WorkerDied,
)
from chord_core.runtime.workers import WorkerSpec, serve, worker_main
from chord_core.threads import native_end

log = logging.getLogger(__name__)


class WorkerHandle(ABC):
    """One started worker, as the manager sees it."""

    worker_id: str

    @abstractmethod
    def run(self, tasks: list[Any], ahead: tuple[Any, ...] = ()) -> None:
        """Hand the worker its next tasks (one, or a batch sharing a model call), and the
        tasks queued behind them (``RunTasks.ahead``)."""

    @abstractmethod
    def cancel(self, task_id: str) -> None:
        """Ask the worker to stop the task it is running (if it is that one)."""

    def expect(self, call: str, ahead: tuple[Any, ...]) -> None:
        """While the worker runs the call that began with task ``call``: the tasks now
        queued behind it, to read ahead (a hint; an executor may ignore it)."""

    @abstractmethod
    def stop(self) -> None:
        """Ask the worker to finish the task in hand and exit."""

    @abstractmethod
    def terminate(self) -> None:
        """Stop the worker now (SIGTERM for a process)."""

    @abstractmethod
    def kill(self) -> None:
        """Stop the worker at once, whatever it is doing (SIGKILL for a process)."""

    @abstractmethod
    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the worker to end; True when it has."""

    @property
    @abstractmethod
    def pid(self) -> int | None:
        """The worker's process id (None where it has none of its own)."""

    @property
    @abstractmethod
    def exitcode(self) -> int | None:
        """How it ended (None while it runs, or where there is no exit code)."""

    @property
    def node(self) -> str | None:
        """The machine it runs on, where that is not this one (Ray)."""
        return None


class Executor(ABC):
    """Starts workers and reports what they say and when they die. ``events`` must return
    early on ``wake()``; one that cannot wait on everything at once says for how long it may
    be left waiting (``max_wait_s``: the dispatcher never passes a longer timeout)."""

    max_wait_s: float | None = 0.05  # an executor that cannot be woken: the old poll

    @abstractmethod
    def start(self, spec: WorkerSpec) -> WorkerHandle:
        """Start a worker for ``spec``; it reports ``Ready`` when its model is loaded."""

    @abstractmethod
    def events(self, timeout: float | None) -> list[Event]:
        """Every message and death since the last call, in order per worker; waits up to
        ``timeout`` s (None: until something happens) for the first, or until ``wake``. A
        death comes after the worker's last message."""

    def wake(self) -> None:
        """Make a waiting (or the next) ``events`` call return now (any thread)."""

    def close(self) -> None:
        """Release what the executor itself holds (workers are stopped by the manager)."""

    def nodes(self) -> list[dict[str, Any]]:
        """The machines the workers run on, when there is more than this one (Ray)."""
        return []


class QueueHandle(WorkerHandle):
    """A handle that talks to its worker through an ``inbox`` and a ``control`` queue (any
    object with ``put``: multiprocessing, ``queue`` or Ray queues)."""

    inbox: Any
    control: Any

    def run(self, tasks: list[Any], ahead: tuple[Any, ...] = ()) -> None:
        self.inbox.put(RunTasks(tuple(tasks), tuple(ahead)))

    def cancel(self, task_id: str) -> None:
        self.control.put(CancelTask(task_id))

    def expect(self, call: str, ahead: tuple[Any, ...]) -> None:
        self.control.put(Expect(call, tuple(ahead)))

    def stop(self) -> None:
        self.inbox.put(StopWorker())
        self.control.put(StopWorker())


def stop_all(handles: list[WorkerHandle], *, abort: bool, timeout: float) -> None:
    """Ask every worker to stop after the task in hand (``abort``: terminate now), wait up to
    ``timeout`` s (2 s when aborting), then kill what is left."""
    for h in handles:
        if abort:
            h.terminate()
        else:
            h.stop()
    deadline = time.monotonic() + (2.0 if abort else timeout)
    for h in handles:
        if not h.join(max(0.1, deadline - time.monotonic())):
            h.kill()
            h.join(2.0)


# -- local processes ------------------------------------------------------------------------

class _PipeOutbox:
    """The worker's end of its pipe, with the ``put`` of a queue (thread-safe)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def put(self, msg: Any) -> None:
        with self._lock:
            self._conn.send(msg)

    def __getstate__(self) -> dict[str, Any]:  # crosses to the spawned worker
        return {"conn": self._conn}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _PipeOutbox.__init__(self, state["conn"])


class _ProcessHandle(QueueHandle):
    def __init__(self, worker_id: str, proc: BaseProcess, inbox: Any, control: Any,
                 reader: Any) -> None:
        self.worker_id, self.proc, self.inbox, self.control = worker_id, proc, inbox, control
        self.reader: Any = reader
        self.reported = False  # its end (Stopped or WorkerDied) was told

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()

    def join(self, timeout: float) -> bool:
        self.proc.join(timeout)
        return not self.proc.is_alive()

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    @property
    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def read_all(self, out: list[Event]) -> None:
        """Everything in the pipe now; at EOF (the worker is gone) the reader is closed."""
        try:
            while self.reader is not None and self.reader.poll():
                msg = self.reader.recv()
                out.append(msg)
                if isinstance(msg, Stopped):
                    self.reported = True
        except (EOFError, OSError):
            self.reader.close()
            self.reader = None


class ProcessExecutor(Executor):
    """Workers as spawned processes (``worker_main``: CUDA_VISIBLE_DEVICES, parent-death
    signal, threads, then ``serve``). ``target`` replaces ``worker_main`` (tests)."""

    max_wait_s = None  # woken by a message, a death (the sentinel) or ``wake``

    def __init__(self, target: Callable[..., None] | None = None) -> None:
        self._ctx = mp.get_context("spawn")
        self._target = target
        self._handles: list[_ProcessHandle] = []
        self._lock = threading.Lock()
        self._bell, self._ring = mp.Pipe(duplex=False)  # wake(): a byte to wait on
        self._ring_lock = threading.Lock()
        self._rung = False  # one byte at most waits in the pipe: a wake never blocks

    def wake(self) -> None:
        with self._ring_lock:
            if not self._rung:
                self._ring.send_bytes(b"!")
                self._rung = True

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        reader, writer = self._ctx.Pipe(duplex=False)
        inbox, control = self._ctx.Queue(), self._ctx.Queue()
        target = self._target or worker_main
        proc = self._ctx.Process(target=target, name=f"chord-{spec.worker_id}", daemon=True,
                                 args=(spec, inbox, _PipeOutbox(writer), control))
        proc.start()
        writer.close()  # the worker holds the only write end: EOF when it is gone
        handle = _ProcessHandle(spec.worker_id, proc, inbox, control, reader)
        with self._lock:
            self._handles.append(handle)
        return handle

    def events(self, timeout: float | None) -> list[Event]:
        with self._lock:
            handles = list(self._handles)
        waitables: list[Any] = [h.reader for h in handles if h.reader is not None]
        waitables += [h.proc.sentinel for h in handles]
        waitables.append(self._bell)
        out: list[Event] = []
        ready = set(wait_ready(waitables, timeout))
        if self._bell in ready:  # rung: whatever woke us is looked at by the caller
            with self._ring_lock:
                while self._bell.poll():
                    self._bell.recv_bytes()
                self._rung = False
        for h in handles:
            h.read_all(out)
            if h.proc.sentinel in ready:
                h.proc.join(0.1)  # reap it, so exitcode is set
                h.read_all(out)   # its last words come before its death
                if not h.reported:
                    h.reported = True
                    out.append(WorkerDied(h.worker_id, h.proc.exitcode))
                with self._lock:
                    self._handles.remove(h)
                if h.reader is not None:
                    h.reader.close()
                    h.reader = None
        return out


# -- threads of this process (a thread's join waits for its OS thread too: chord_core/threads.py)

class _Ended:
    """Put on a ThreadExecutor's outbox by a worker thread as it ends."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id


class _Wake:
    """Put on an outbox by ``wake``: it only ends the wait (picklable, for Ray's queue)."""

    worker_id = ""


_WAKE = _Wake()

class _ThreadHandle(QueueHandle):
    def __init__(self, worker_id: str, thread: threading.Thread, inbox: queue.Queue[Any],
                 control: queue.Queue[Any]) -> None:
        self.worker_id, self.thread, self.inbox, self.control = worker_id, thread, inbox, control
        self.reported = False

    # A thread cannot be killed: stopping asks it to end after the task in hand.
    terminate = kill = QueueHandle.stop

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        if self.thread.is_alive():
            return False
        native_end(self.thread)
        return True

    @property
    def pid(self) -> int | None:
        return None

    @property
    def exitcode(self) -> int | None:
        return None


class ThreadExecutor(Executor):
    """Workers as threads running ``serve`` in this process. ``engine_factory`` builds each
    worker's engine from a ModelConfig (default ``Engine``; tests pass a scripted one)."""

    max_wait_s = None  # a thread's end is told on the outbox (``_Ended``), like a message

    def __init__(self, engine_factory: Callable[[Any], Any] | None = None) -> None:
        self._factory = engine_factory
        self._outbox: queue.Queue[Any] = queue.Queue()  # Events, _Ended, _WAKE
        self._handles: list[_ThreadHandle] = []
        self._lock = threading.Lock()

    def _serve(self, spec: WorkerSpec, inbox: queue.Queue[Any], control: queue.Queue[Any]
               ) -> None:
        try:
            serve(spec, inbox, self._outbox, control, engine_factory=self._factory)
        finally:  # however it ends (SystemExit in tests), the dispatcher hears of it
            self._outbox.put(_Ended(spec.worker_id))

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        inbox: queue.Queue[Any] = queue.Queue()
        control: queue.Queue[Any] = queue.Queue()
        thread = threading.Thread(target=self._serve, name=f"chord-{spec.worker_id}",
                                  daemon=True, args=(spec, inbox, control))
        handle = _ThreadHandle(spec.worker_id, thread, inbox, control)
        with self._lock:
            self._handles.append(handle)
        thread.start()
        return handle

    def wake(self) -> None:
        self._outbox.put(_WAKE)

    def events(self, timeout: float | None) -> list[Event]:
        out: list[Any] = []
        try:
            out.append(self._outbox.get(timeout=timeout))
            while True:
                out.append(self._outbox.get_nowait())
        except queue.Empty:
            pass
        ended = {m.worker_id for m in out if isinstance(m, _Ended)}
        out = [m for m in out if m is not _WAKE and not isinstance(m, _Ended)]
        with self._lock:
            for h in list(self._handles):
                if any(isinstance(m, Stopped) and m.worker_id == h.worker_id for m in out):
                    h.reported = True
                if h.worker_id in ended:
                    # it said so on its way out: it ends now. Its native part too
                    # (``native_end``): the handle leaves the list here, so shutdown's
                    # join would not see it (``ask`` exited -6 after its answer)
                    h.join(5.0)
                if not h.thread.is_alive():
                    while True:  # its last words come before its death
                        try:
                            out.append(self._outbox.get_nowait())
                        except queue.Empty:
                            break
                    if not h.reported:
                        out.append(WorkerDied(h.worker_id, None))
                    self._handles.remove(h)
        return out
