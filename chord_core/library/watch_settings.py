"""A watch folder's settings (``WatchSettings``: what ``watch``'s flags and ``CHORD_WATCH``
name), checked when they are made, and the inbox a watcher's thread blocks on (``Inbox``:
messages and timers, no fixed tick)."""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import queue
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from chord_core.errors import ConfigError

WATCH_TASKS = ("describe", "ground", "entail", "chapters")
STOP = object()  # the message that ends an inbox's thread


@dataclass(frozen=True)
class WatchSettings:
    """One watched folder and what is done with its clips."""

    folder: str
    task: str = "describe"
    query: str = ""
    model: str = "test"
    max_new_tokens: int = 512
    settle_s: float = 5.0
    rescan_s: float = 30.0
    statements: tuple[str, ...] = ()  # standing checks (alerts.py)
    threshold: float = 0.8
    hook: str = ""  # a local command run per alert (hooks.py)

    def __post_init__(self) -> None:
        if self.task not in WATCH_TASKS:
            raise ConfigError(f"a watch folder's task is one of {', '.join(WATCH_TASKS)}, "
                              f"not {self.task!r}", hint="e.g. --task describe")
        if self.task in ("ground", "entail") and not self.query.strip():
            raise ConfigError(f"--task {self.task} needs --query (what to find or check)",
                              hint='e.g. --query "a person climbs the fence"')
        if not (0.0 <= self.settle_s <= 3600 and 0.5 <= self.rescan_s <= 86400):
            raise ConfigError("settle time must be 0–3600 s and the rescan 0.5–86400 s",
                              hint="e.g. --settle-s 5 --rescan-s 30")
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"the alert threshold is a probability in (0, 1], got "
                              f"{self.threshold}", hint="e.g. --threshold 0.8")

    @property
    def watch_id(self) -> str:
        """The same folder with the same task, query and model is the same watch."""
        ident = json.dumps([str(Path(self.folder)), self.task, self.query.strip(), self.model,
                            self.max_new_tokens])
        return "w-" + hashlib.sha256(ident.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "statements": list(self.statements), "watch": self.watch_id}


class Inbox:
    """A thread's inbox of callables and its timers: ``run`` blocks until a message comes or
    the next timer is due; no fixed tick."""

    def __init__(self) -> None:
        self._q: queue.Queue[Callable[[], None] | object] = queue.Queue()  # or STOP
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def post(self, fn: Callable[[], None]) -> None:
        self._q.put(fn)

    def stop(self) -> None:
        self._q.put(STOP)

    def after(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` on the inbox's thread ``delay_s`` from now (that thread only)."""
        heapq.heappush(self._timers, (time.monotonic() + delay_s, next(self._order), fn))

    def next_message(self) -> Callable[[], None] | None | object:
        """The next message (``STOP`` to end), or None when a timer came due first."""
        timeout = None
        if self._timers:
            timeout = max(0.0, self._timers[0][0] - time.monotonic())
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None

    def due(self) -> list[Callable[[], None]]:
        now, out = time.monotonic(), []
        while self._timers and self._timers[0][0] <= now:
            out.append(heapq.heappop(self._timers)[2])
        return out
