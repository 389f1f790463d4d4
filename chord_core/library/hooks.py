"""Alert hooks: a local command run once per new alert, off the watcher's path.

A standing check that fires puts the alert on a **bounded queue** (``QUEUE_MAX``); one
thread per watch takes them in order and runs the hook: the command split like a shell
would (``shlex``) and run without one, the alert as JSON on its stdin, ``HOOK_TIMEOUT_S``
at most (then killed). A slow hook delays only the hooks after it, never the watcher; a
full queue refuses the alert's run with a reason (recorded like a run).

The hook gets a **minimal environment**: ``PATH``, ``HOME``, ``LANG``/``LC_ALL``, ``TZ``,
``TMPDIR`` from Chord's own, and ``CHORD_ALERT_ID`` / ``CHORD_ALERT_WATCH`` — never the
API key, tokens or anything else Chord was started with.

Each run is **recorded** (``watch_table.record_hook_run``): exit status (or why it did not
run / was killed), start time, duration, and the first ``OUTPUT_LINES`` lines of its stdout
and stderr (``OUTPUT_CHARS`` at most). Of each stream only the first ``OUTPUT_BYTES`` are
kept; the rest is read and dropped (a hook that printed without end was held whole in the
watcher's memory). The run ends when the hook exits (or is killed): a process it left
behind that still holds its output (``setsid cmd &``, out of the killed group) is waited
for ``DRAIN_S`` at most (it held the hooks' thread until it ended). ``watch`` prints it, ``GET /v1/alerts`` returns it as each alert's
``hook_run``, and the app's alerts section shows it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shlex
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)

HOOK_TIMEOUT_S = 30.0
QUEUE_MAX = 100
OUTPUT_LINES = 10
OUTPUT_CHARS = 4000  # of the recorded output, both streams together
OUTPUT_BYTES = 64 * 1024  # kept of each stream while it is read
DRAIN_S = 2.0  # the output still read once the hook has exited (or was killed)
KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
_STOP = object()


@dataclass(frozen=True)
class HookRun:
    """One run of an alert's hook, as recorded."""

    alert_id: int
    watch: str
    command: str
    started_at: float
    duration_s: float
    exit_code: int | None  # None: not run, or killed at the timeout
    outcome: str  # "exit 0", "exit 3", "timed out after 30 s", "not run: …"
    output: str  # the first lines of stdout, then of stderr

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        first = next((ln for ln in self.output.splitlines() if ln.strip()), "")
        return (f"hook for alert {self.alert_id}: {self.outcome} in {self.duration_s:.1f} s"
                + (f": {first[:200]}" if first else ""))


def hook_env(alert: dict[str, Any]) -> dict[str, str]:
    """The environment a hook runs with (see the module docstring)."""
    from chord_core.config import passed_environment

    env = passed_environment(KEPT_ENV)
    env.setdefault("PATH", os.defpath)
    env["CHORD_ALERT_ID"] = str(alert.get("id", ""))
    env["CHORD_ALERT_WATCH"] = str(alert.get("watch", ""))
    return env


def _first_lines(text: str, n: int = OUTPUT_LINES) -> str:
    return "\n".join(text.splitlines()[:n])


class _Drain:
    """Reads a pipe to its end on a thread of its own, keeping the first OUTPUT_BYTES (the
    hook never blocks on a full pipe, and the watcher never holds more)."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._kept = stream, bytearray()
        self._thread = threading.Thread(target=self._read, name="chord-hook-output",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        fd = self._stream.fileno()
        try:
            while chunk := os.read(fd, 65536):
                if len(self._kept) < OUTPUT_BYTES:
                    self._kept += chunk[:OUTPUT_BYTES - len(self._kept)]
        except OSError:
            pass
        finally:
            self._stream.close()  # only here: the fd is not reused while it is read

    def text(self, wait_s: float) -> str:
        """What was kept, once the pipe ended or ``wait_s`` passed (a process the hook left
        may hold it open: its thread is left to end with it)."""
        self._thread.join(wait_s)
        return bytes(self._kept).decode("utf-8", "replace")


def _feed(stdin: Any, data: bytes) -> None:
    """The alert to the hook's stdin, on a thread (a hook that never reads it blocks only
    that thread, until it exits)."""
    def write() -> None:
        try:
            stdin.write(data)
            stdin.close()
        except OSError:  # it exited, or closed its stdin, first
            pass

    threading.Thread(target=write, name="chord-hook-input", daemon=True).start()


def run_hook(command: str, alert: dict[str, Any],
             timeout_s: float = HOOK_TIMEOUT_S) -> HookRun:
    """Run ``command`` for ``alert`` now (on the calling thread) and say how it went."""
    started = time.time()
    t0 = time.monotonic()
    code: int | None = None
    out = err = ""
    try:
        proc = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=hook_env(alert), start_new_session=True)
    except (OSError, ValueError) as exc:
        outcome = f"not run: {exc}"
    else:
        drains = (_Drain(proc.stdout), _Drain(proc.stderr))
        _feed(proc.stdin, json.dumps(alert).encode())
        try:
            code = proc.wait(timeout=timeout_s)
            outcome = f"exit {code}"
        except subprocess.TimeoutExpired:
            _kill_group(proc)  # the hook and whatever it started in its group
            proc.wait()
            outcome = f"timed out after {timeout_s:g} s (killed)"
        deadline = time.monotonic() + DRAIN_S
        out, err = (d.text(max(0.0, deadline - time.monotonic())) for d in drains)
    output = _first_lines(out)
    if err.strip():
        output = (output + "\n" if output else "") + "stderr: " + _first_lines(err)
    return HookRun(int(alert.get("id", 0)), str(alert.get("watch", "")), command, started,
                   round(time.monotonic() - t0, 3), code, outcome, output[:OUTPUT_CHARS])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


class HookRunner:
    """The hook runs of one watch: a bounded queue and one thread. ``record(run)`` keeps
    each run (the table), ``on_run(run)`` tells whoever shows them (the ``watch`` CLI),
    ``after()`` is called once a run is counted done."""

    def __init__(self, command: str, record: Callable[[HookRun], None],
                 on_run: Callable[[HookRun], None] | None = None,
                 timeout_s: float = HOOK_TIMEOUT_S, queue_max: int = QUEUE_MAX,
                 after: Callable[[], None] | None = None) -> None:
        self.command, self.record, self.on_run, self.after = command, record, on_run, after
        self.timeout_s = timeout_s
        self._todo: queue.Queue[Any] = queue.Queue(maxsize=queue_max)
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._loop, name="chord-alert-hooks",
                                        daemon=True)
        self._thread.start()

    def put(self, alert: dict[str, Any]) -> bool:
        """Queue the hook run of ``alert``; False (and a recorded refusal) when full."""
        with self._lock:
            self._pending += 1
        try:
            self._todo.put_nowait(alert)
            return True
        except queue.Full:
            run = HookRun(int(alert["id"]), str(alert.get("watch", "")), self.command,
                          time.time(), 0.0, None, f"not run: {self._todo.maxsize} hook runs "
                          "already waiting (the hook is slower than the alerts)", "")
            self._finish(run)
            return False

    def pending(self) -> int:
        with self._lock:
            return self._pending

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued run finished (tests, ``watch --once``)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        try:
            self._todo.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            alert = self._todo.get()
            if alert is _STOP:
                return
            self._finish(run_hook(self.command, alert, self.timeout_s))

    def _finish(self, run: HookRun) -> None:
        if run.outcome != "exit 0":
            log.warning("alert hook %r: %s", run.command, run.line())
        for fn in (self.record, self.on_run):
            if fn is None:
                continue
            try:
                fn(run)
            except Exception:  # noqa: BLE001 — a store error must not stop the hooks
                log.exception("hook run of alert %s not recorded", run.alert_id)
        with self._lock:
            self._pending -= 1
            self._idle.notify_all()
        if self.after is not None:
            self.after()  # e.g. the watcher looks whether it is idle now
