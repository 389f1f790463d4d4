"""A job handle: what ``JobManager.submit`` returns, resolved when the job finishes.

``handle.done()``, ``handle.result(timeout=None)`` (blocks; returns the final ``JobStatus``:
a failed or cancelled job is a status with its error, not an exception),
``handle.add_done_callback(fn)`` (``fn(handle)`` once finished) and ``await handle`` (the
final status, without blocking the event loop). Anchors: vLLM's per-request output collector
(an ``asyncio.Event`` per request, set by the engine's loop) and Ray Serve's
``DeploymentResponse`` (a future that can be awaited or waited on).

The manager's dispatcher resolves a job's ``Completion`` after the tick that finished it,
once that tick's store writes were made, and outside the manager's lock. Waiters never
take the lock: a handle reads the job's latest status snapshot from its entry (an immutable
``JobStatus`` replaced as a whole), so an event loop awaiting a handle never waits on a
dispatcher that is busy writing SQLite.

A handle *is* its job id (a ``str`` subclass): code that stores, compares, logs or sends job
ids keeps working, and it pickles as the plain id. ``handle.job_id`` is the plain ``str``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Generator

if TYPE_CHECKING:  # jobs.JobTable makes handles: the import would go round
    from chord_core.runtime.jobs import JobStatus

log = logging.getLogger(__name__)


class Watchers:
    """Functions told of each change of something (a job, a service's long run): ``watch(fn)``
    keeps ``fn`` and returns the function that stops it; ``notify()`` calls each, outside
    the small lock that guards the list (one that raises is logged and skipped)."""

    def __init__(self, owner: str = "") -> None:
        self.owner = owner
        self._lock = threading.Lock()
        self._fns: list[Callable[[], None]] = []

    def watch(self, fn: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._fns.append(fn)

        def stop() -> None:
            with self._lock:
                if fn in self._fns:
                    self._fns.remove(fn)
        return stop

    def notify(self) -> None:
        with self._lock:
            fns = list(self._fns)
        for fn in fns:
            try:
                fn()
            except Exception:  # noqa: BLE001 — one bad watcher must not stop the others
                log.exception("a watcher %r of %s failed", fn, self.owner or "a job")


class Completion:
    """Set once, when a job finished: wakes blocked waiters and runs the done callbacks.
    Watchers (``watch``) also hear of each change before that (started, progress): the SSE
    route streams from them. Its own small lock guards the lists (never the manager's)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[tuple[Callable[[Any], None], Any]] = []
        self._watchers = Watchers()

    def watch(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` on each change of the job (and when it finished); returns the
        function that stops it."""
        return self._watchers.watch(fn)

    def changed(self) -> None:
        """The job's status changed (the manager calls it; watchers must be quick)."""
        self._watchers.notify()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def add(self, fn: Callable[[Any], None], handle: Any) -> bool:
        """Keep ``fn`` to call with ``handle`` when set; False when already set (the caller
        then calls it itself)."""
        with self._lock:
            if self._event.is_set():
                return False
            self._callbacks.append((fn, handle))
            return True

    def set(self) -> None:
        """Mark finished and run the callbacks (on the setting thread: they must be quick,
        e.g. ``loop.call_soon_threadsafe``). A callback that raises is logged and skipped."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn, handle in callbacks:
            _call(fn, handle)
        self.changed()


def _call(fn: Callable[[Any], None], handle: Any) -> None:
    try:
        fn(handle)
    except Exception:  # noqa: BLE001 — one bad callback must not stop the dispatcher
        log.exception("done callback %r of %s failed", fn, handle)


class JobHandle(str):
    """A submitted job: its id, and a future of its final ``JobStatus``."""

    _completion: Completion
    _read: Callable[[], JobStatus]

    def __new__(cls, job_id: str, completion: Completion,
                read: Callable[[], JobStatus]) -> JobHandle:
        handle = super().__new__(cls, job_id)
        handle._completion, handle._read = completion, read
        return handle

    @classmethod
    def finished(cls, status: JobStatus) -> JobHandle:
        """A handle of a job that finished before it was asked for (read from the store)."""
        completion = Completion()
        completion.set()
        return cls(status.job_id, completion, lambda: status)

    @property
    def job_id(self) -> str:
        return str.__str__(self)

    def status(self) -> JobStatus:
        """The job's latest status, finished or not (no lock taken)."""
        return self._read()

    def done(self) -> bool:
        return self._completion.is_set()

    def result(self, timeout: float | None = None) -> JobStatus:
        """Block until the job finished; its final status. TimeoutError after ``timeout``."""
        if not self._completion.wait(timeout):
            st = self._read()
            raise TimeoutError(f"{self.job_id} still {st.state.value} after {timeout} s")
        return self._read()

    def on_change(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` (on the dispatcher thread: keep it quick) whenever the job starts,
        makes progress or finishes; returns the function that stops it."""
        return self._completion.watch(fn)

    def add_done_callback(self, fn: Callable[[JobHandle], None]) -> None:
        """Call ``fn(handle)`` once the job finished: at once (here) when it already has,
        else on the manager's dispatcher thread right after it finishes."""
        if not self._completion.add(fn, self):
            _call(fn, self)

    def __await__(self) -> Generator[Any, None, JobStatus]:
        yield from woken_by(self.add_done_callback)
        return self._read()

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (str, (self.job_id,))  # across processes a handle is its plain id


def woken_by(add_done_callback: Callable[[Callable[[Any], None]], None]
             ) -> Generator[Any, None, None]:
    """Wait, on the running event loop, until a done callback fires (on whatever thread
    calls it): what ``await handle`` does for a job or a group, without blocking the loop."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake(_: Any) -> None:
        try:
            loop.call_soon_threadsafe(_resolve, woken)
        except RuntimeError:  # the loop closed meanwhile: no one is waiting
            pass

    add_done_callback(wake)
    yield from woken.__await__()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class CancelFlag(threading.Event):
    """A ``threading.Event`` that also calls back when set, so a waiter blocked on its jobs'
    handles wakes on a Cancel at once instead of checking the flag every so often."""

    def __init__(self) -> None:
        super().__init__()
        self._hooks = Watchers("a cancel flag")

    def on_set(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` once when the flag is set (at once when it is already); returns the
        function that takes it back. Once: a flag set between the hook's registration and
        the look at the flag, or set twice, called it again."""
        fired = threading.Lock()

        def once() -> None:
            if fired.acquire(blocking=False):
                fn()

        stop = self._hooks.watch(once)
        if self.is_set():
            _call(_drop_arg(once), None)
        return stop

    def set(self) -> None:
        super().set()
        self._hooks.notify()


def _drop_arg(fn: Callable[[], None]) -> Callable[[Any], None]:
    """``fn`` as a callback that is given (and ignores) one argument."""
    return lambda _: fn()
