"""Watch folders inside the app and ``serve`` (``CHORD_WATCH``): each watcher (and its
standing checks) runs on its own thread, blocked on its inbox, over the process's own job
manager and store.

    CHORD_WATCH="/media/cams|describe;/media/dock|ground|a forklift"
        watches separated by ``;``, each ``DIR[|TASK[|QUERY]]`` (task describe by default)
    CHORD_WATCH_CHECKS="a person climbs the fence;a forklift enters the walkway"
        statements checked on every clip of every watch (alerts)
    CHORD_WATCH_THRESHOLD=0.8     P(entailment) at which a moment becomes an alert
    CHORD_WATCH_HOOK="/usr/local/bin/notify-guard"   a local command run per alert

A folder that is not under the media roots, or a bad task, is refused when the process
starts (a ConfigError with a hint), not later.

Only the process that serves starts watchers: never a process that ``multiprocessing``
spawned (a model worker re-runs the app's script when it starts — a watcher there claimed
files under a lease no dispatcher renewed, and queued checks where nothing ran them).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from chord_core.config import env_value
from chord_core.errors import ConfigError
from chord_core.library.watch import WatchSettings
from chord_core.streams.sources import is_stream

log = logging.getLogger(__name__)


def watches_from_env(model: str, env: Mapping[str, str] | None = None) -> list[WatchSettings]:
    """The watches ``CHORD_WATCH`` names (none when it is unset)."""
    text = env_value("CHORD_WATCH", env)
    if not text:
        return []
    statements = tuple(s.strip() for s in env_value("CHORD_WATCH_CHECKS", env).split(";")
                       if s.strip())
    raw_threshold = env_value("CHORD_WATCH_THRESHOLD", env) or "0.8"
    try:
        threshold = float(raw_threshold)
    except ValueError:
        raise ConfigError(f"CHORD_WATCH_THRESHOLD={raw_threshold!r} is not a number",
                          hint="give a probability, e.g. 0.8") from None
    out = []
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        folder, task, query = (entry.split("|", 2) + ["", ""])[:3]
        if is_stream(folder):
            continue  # a live stream: streams/background.py starts it
        out.append(WatchSettings(folder.strip(), task.strip() or "describe", query.strip(),
                                 model, statements=statements, threshold=threshold,
                                 hook=env_value("CHORD_WATCH_HOOK", env)))
    return out


def spawned_child() -> bool:
    """Whether this process was started by ``multiprocessing`` (a worker, not the server)."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


class BackgroundWatches:
    """The watchers of one process, each on its own thread until ``stop()``."""

    def __init__(self, manager: Any, store: Any, settings: list[WatchSettings]) -> None:
        from chord_core.library.alerts import StandingChecks
        from chord_core.library.index import LibraryIndex, store_path
        from chord_core.library.watch import FolderWatcher

        if settings and spawned_child():
            log.info("CHORD_WATCH: not started in a spawned process (pid %d); the server's "
                     "own process watches the folders", os.getpid())
            settings = []
        if any(s.task == "chapters" for s in settings):
            raise ConfigError("CHORD_WATCH cannot run chapters in the app or the service",
                              hint="run `python -m chord_core watch DIR --task chapters` "
                                   "on its own (its runs keep their own rows)")
        self.index = LibraryIndex(store_path(store)) if settings else None
        self.pairs = []
        for s in settings:
            watcher = FolderWatcher(manager, store, s, index=self.index)
            checks = StandingChecks(manager, store, watcher) if s.statements else None
            self.pairs.append((watcher, checks))

    def start(self) -> BackgroundWatches:
        for watcher, _ in self.pairs:
            watcher.start()
            log.info("watching %s (%s)", watcher.folder, watcher.settings.task)
        return self

    def stop(self) -> None:
        for watcher, _ in self.pairs:
            watcher.stop()


def start_from_env(manager: Any, store: Any, model: str) -> BackgroundWatches:
    """``CHORD_WATCH``'s watches over this process's manager and store, started."""
    return BackgroundWatches(manager, store, watches_from_env(model)).start()
