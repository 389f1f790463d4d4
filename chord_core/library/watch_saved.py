"""Watch folders and standing checks set in the app, kept in the job store's file.

Before, only ``CHORD_WATCH`` / ``CHORD_WATCH_CHECKS`` could set them (issue 39). A saved
watch is one row, read back at every start of the app (the table: schema.py):

    library_watch_saved (id, folder, task, query, statements_json, threshold, created_at)
                        UNIQUE (folder, task, query): the same watch is saved once

Checked when saved, as a request from a browser is: the folder is resolved under the media
roots and must be a folder there (``resolve_folder``); the task is one the app runs
(describe, ground, entail: chapters runs on its own, with ``watch``); statements are at most
``MAX_STATEMENTS`` of 1–``MAX_STATEMENT`` characters, no control characters; the threshold
is a probability; at most ``MAX_SAVED`` watches. No hook command can be set here (a command
typed into a browser would run on this machine): alerts of saved watches run none.
``AppWatches`` runs the saved watches of one process (``background.BackgroundWatches``: not
in a spawned worker) and starts or stops them as rows are added or removed.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.errors import ChordError, InputError

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

log = logging.getLogger(__name__)

APP_TASKS = ("describe", "ground", "entail")
MAX_SAVED = 20
MAX_STATEMENTS = 10
MAX_STATEMENT = 200
MAX_QUERY = 200


def _text(value: str, what: str, limit: int) -> str:
    text = " ".join(str(value or "").split())  # newlines and tabs become spaces
    if len(text) > limit or any(ord(c) < 32 for c in text):
        raise InputError(f"the {what} is longer than {limit} characters or has control "
                         "characters", hint=f"say it in at most {limit} characters of text")
    return text


def check_watch(folder: str, task: str, query: str, statements: Sequence[str],
                threshold: float) -> dict[str, Any]:
    """The watch as it will be saved, or an InputError / ConfigError saying what is wrong."""
    from chord_core.library.watch import WatchSettings
    from chord_core.media.roots import resolve_folder

    path = resolve_folder(str(folder or ""))  # under the media roots, a folder
    if task not in APP_TASKS:
        raise InputError(f"a watch set in the app describes, grounds or checks, not {task!r}",
                         hint="for chapters run `python -m chord_core watch DIR --task "
                              "chapters` on its own")
    clean = [_text(s, "statement", MAX_STATEMENT) for s in statements if str(s).strip()]
    if len(clean) > MAX_STATEMENTS:
        raise InputError(f"{len(clean)} statements: at most {MAX_STATEMENTS} per watch",
                         hint="keep the statements that matter most")
    query = _text(query, "query", MAX_QUERY)
    WatchSettings(str(path), task, query, statements=tuple(clean),  # its own checks
                  threshold=float(threshold))
    return {"folder": str(path), "task": task, "query": query, "statements": clean,
            "threshold": round(float(threshold), 4)}


def save_watch(index: LibraryIndex, folder: str, task: str = "describe", query: str = "",
               statements: Sequence[str] = (), threshold: float = 0.8) -> dict[str, Any]:
    """Check and save a watch; returns its row. The same folder, task and query again
    replaces the statements and threshold."""
    row = check_watch(folder, task, query, statements, threshold)
    with index.write() as conn:
        known = conn.execute("SELECT id FROM library_watch_saved WHERE folder = ? AND "
                             "task = ? AND query = ?", (row["folder"], task, row["query"])
                             ).fetchone()
        count = conn.execute("SELECT COUNT(*) FROM library_watch_saved").fetchone()[0]
        if known is None and count >= MAX_SAVED:
            raise InputError(f"{MAX_SAVED} watches are saved, the most",
                             hint="remove one you no longer need first")
        conn.execute(
            "INSERT INTO library_watch_saved (folder, task, query, statements_json, threshold,"
            " created_at) VALUES (?,?,?,?,?,?) ON CONFLICT (folder, task, query) DO UPDATE "
            "SET statements_json = excluded.statements_json, threshold = excluded.threshold",
            (row["folder"], task, row["query"], json.dumps(row["statements"]),
             row["threshold"], time.time()))
    return next(w for w in saved_watches(index)
                if (w["folder"], w["task"], w["query"]) == (row["folder"], task, row["query"]))


def saved_watches(index: LibraryIndex) -> list[dict[str, Any]]:
    """Every saved watch, oldest first, its statements as a list."""
    return [{**dict(r), "statements": json.loads(r["statements_json"])}
            for r in index.read("SELECT * FROM library_watch_saved ORDER BY id")]


def remove_watch(index: LibraryIndex, watch_id: int) -> bool:
    """Forget a saved watch (its analysed files, checks and alerts are kept)."""
    with index.write() as conn:
        return conn.execute("DELETE FROM library_watch_saved WHERE id = ?",
                            (int(watch_id),)).rowcount == 1


def settings_of(row: dict[str, Any], model: str) -> Any:
    """The ``WatchSettings`` a saved row runs with (no hook: see the module docstring)."""
    from chord_core.library.watch import WatchSettings

    return WatchSettings(row["folder"], row["task"], row["query"], model,
                         statements=tuple(row["statements"]), threshold=row["threshold"])


def watch_state(index: LibraryIndex, watch: str) -> dict[str, int]:
    """A running watch's counts: files by state, checks waiting, alerts raised."""
    files = {str(r[0]): int(r[1]) for r in index.read(
        "SELECT state, COUNT(*) FROM library_watch_files WHERE watch = ? GROUP BY state",
        (watch,))}
    checks = index.read("SELECT COUNT(*) FROM library_alert_checks WHERE watch = ? AND "
                        "state NOT IN ('done', 'error')", (watch,))[0][0]
    alerts = index.read("SELECT COUNT(*) FROM library_alerts WHERE watch = ?", (watch,))[0][0]
    return {"done": files.get("done", 0), "error": files.get("error", 0),
            "working": sum(n for s, n in files.items() if s not in ("done", "error")),
            "checks": int(checks), "alerts": int(alerts)}


class AppWatches:
    """The saved watches running in this process: ``sync`` starts the new rows' watchers and
    stops the removed ones'; a row that cannot start (its folder gone) keeps its error."""

    def __init__(self, manager: Any, store: Any, model: str,
                 taken: Sequence[str] = ()) -> None:
        self.manager, self.store, self.model = manager, store, model
        self.taken = set(taken)  # watch ids CHORD_WATCH already runs in this process
        self.running: dict[int, Any] = {}  # saved id → BackgroundWatches
        self.errors: dict[int, str] = {}
        self.signature: dict[int, str] = {}  # saved id → its statements and threshold

    def sync(self, rows: Sequence[dict[str, Any]]) -> None:
        from chord_core.library.background import BackgroundWatches

        wanted = {int(r["id"]): (r, json.dumps([r["statements"], r["threshold"]]))
                  for r in rows}
        for wid in list(self.running):
            if wid not in wanted or self.signature.get(wid) != wanted[wid][1]:
                self.running.pop(wid).stop()  # removed, or its checks changed: again
        self.errors = {w: e for w, e in self.errors.items()
                       if w in wanted and self.signature.get(w) == wanted[w][1]}
        for wid, (row, signature) in wanted.items():
            if wid in self.running or wid in self.errors:
                continue
            self.signature[wid] = signature
            try:
                settings = settings_of(row, self.model)
                if settings.watch_id in self.taken:
                    raise InputError("CHORD_WATCH already watches this folder this way",
                                     hint="remove it here, or from CHORD_WATCH")
                self.running[wid] = BackgroundWatches(
                    self.manager, self.store, [settings]).start()
            except (ChordError, OSError) as exc:
                self.errors[wid] = getattr(exc, "message", str(exc))
                log.warning("saved watch %d not started: %s", wid, self.errors[wid])

    def watch_id(self, saved_id: int) -> str | None:
        """The running watch's id in the watch tables (None when it does not run here)."""
        run = self.running.get(int(saved_id))
        pairs = getattr(run, "pairs", None) or []
        return pairs[0][0].settings.watch_id if pairs else None

    def stop(self) -> None:
        for run in self.running.values():
            run.stop()
        self.running.clear()
