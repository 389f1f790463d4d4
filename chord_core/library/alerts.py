"""Standing checks: a watch folder's statements, checked on every clip it analyses, with the
entailment curve Chord already has (an ``entail`` job per clip and statement: P(entailment)
per sampled frame, at the frames' presentation times).

A **moment** is a run of consecutive checked frames whose P(entailment) is at least the
folder's threshold; it becomes an **alert**: clip, statement, time range (first to last
frame of the run), the highest probability, and the evidence frames (up to
MAX_EVIDENCE best, time and probability). When a folder's statements change (one added
or edited, at a restart), the clips it finished before are checked against the new ones
too, once each (``StandingChecks.backfill``). Tables, made here:

    library_alert_checks (watch, clip_key, statement, path, job_id, state)   one per clip
    library_alerts (id, watch, clip_key, statement, path, start_s, end_s, probability,
                    evidence_json, job_id, created_at, hook)
                    UNIQUE (watch, clip_key, statement, start_s): each fires once per clip
                    and moment, also when a check is repeated after a restart

A new alert runs the folder's **hook** when it has one: a local command (split like a shell
would, run without one), the alert as JSON on its stdin, 30 s at most; its exit status is
kept on the alert. Chord itself makes no network call; a hook may (that is the user's choice).
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import threading
import time
from typing import Any, Sequence

log = logging.getLogger(__name__)

MAX_EVIDENCE = 5
HOOK_TIMEOUT_S = 30.0
# How often ``StandingChecks.step`` looks for analysed clips with no check claimed: a clip
# whose claim failed (the store busy past its timeout under disk load, between the watcher
# marking the file done and the claim) is checked within this long, not at the next restart.
BACKFILL_EVERY_S = 5.0
_stored = threading.Condition()  # notified when an alert is stored (here or elsewhere)
_stored_count = 0


def alerts_stored() -> int:
    """A cursor for ``wait_for_alert``: how many alert signals this process has seen."""
    return _stored_count


def wait_for_alert(seen: int, timeout: float) -> int:
    """Block until an alert is stored past the cursor ``seen`` — by this process, or by
    another one on the same store once ``listen_for_alerts`` was called (alert_signal.py)
    — or ``timeout`` seconds pass; returns the new cursor."""
    with _stored:
        _stored.wait_for(lambda: _stored_count > seen, timeout)
        return _stored_count


def _note_stored() -> None:
    global _stored_count
    with _stored:
        _stored_count += 1
        _stored.notify_all()


def listen_for_alerts(index: Any) -> bool:
    """Wake ``wait_for_alert`` when any process stores an alert in ``index``'s store;
    True when that is live (file events), False when only a re-read finds them."""
    from chord_core.library.alert_signal import listen

    return listen(index.path, _note_stored)


def store_alert(index: Any, watch: str, check: dict[str, Any],
                moment: dict[str, Any]) -> int | None:
    """Store one alert (a moment of a check) and wake its streams in every process; its
    id, or None when this clip's moment fired before."""
    from chord_core.library.alert_signal import announce

    with index.write() as conn:
        cur = conn.execute(
            "INSERT OR IGNORE INTO library_alerts (watch, clip_key, statement, path, "
            "start_s, end_s, probability, evidence_json, job_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (watch, check["clip_key"], check["statement"], check["path"], moment["start_s"],
             moment["end_s"], moment["probability"], json.dumps(moment["evidence"]),
             check["job_id"], time.time()))
        alert_id = cur.lastrowid if cur.rowcount == 1 else None
    if alert_id is not None:
        _note_stored()
        announce(index.path, alert_id)
    return alert_id


_DDL = """
CREATE TABLE IF NOT EXISTS library_alert_checks (
    watch TEXT NOT NULL, clip_key TEXT NOT NULL, statement TEXT NOT NULL, path TEXT NOT NULL,
    job_id TEXT, state TEXT NOT NULL, PRIMARY KEY (watch, clip_key, statement));
CREATE TABLE IF NOT EXISTS library_alerts (
    id INTEGER PRIMARY KEY, watch TEXT NOT NULL, clip_key TEXT NOT NULL,
    statement TEXT NOT NULL, path TEXT NOT NULL, start_s REAL NOT NULL, end_s REAL NOT NULL,
    probability REAL NOT NULL, evidence_json TEXT NOT NULL, job_id TEXT NOT NULL,
    created_at REAL NOT NULL, hook TEXT NOT NULL DEFAULT '',
    UNIQUE (watch, clip_key, statement, start_s));
"""


def create_tables(index: Any) -> None:
    with index.write() as conn:
        for statement in _DDL.split(";"):
            if statement.strip():
                conn.execute(statement)


def moments(frames: Sequence[dict[str, Any]], threshold: float) -> list[dict[str, Any]]:
    """Runs of consecutive frames at or over ``threshold`` (see the module docstring)."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for frame in sorted(frames, key=lambda f: float(f["t_s"])) + [None]:  # type: ignore[list-item]
        if frame is not None and float(frame.get("entailment", 0.0)) >= threshold:
            run.append(frame)
            continue
        if run:
            best = sorted(run, key=lambda f: -float(f["entailment"]))[:MAX_EVIDENCE]
            out.append({"start_s": round(float(run[0]["t_s"]), 4),
                        "end_s": round(float(run[-1]["t_s"]), 4),
                        "probability": round(max(float(f["entailment"]) for f in run), 4),
                        "evidence": [{"t_s": round(float(f["t_s"]), 4),
                                      "frame_index": int(f.get("frame_index", -1)),
                                      "entailment": round(float(f["entailment"]), 4)}
                                     for f in sorted(best, key=lambda f: float(f["t_s"]))]})
            run = []
    return out


def list_alerts(index: Any, *, after_id: int = 0, limit: int = 100,
                watch: str | None = None) -> list[dict[str, Any]]:
    """Alerts with ids over ``after_id``, oldest first (what the SSE stream sends next)."""
    create_tables(index)
    where, params = "id > ?", [int(after_id)]
    if watch:
        where += " AND watch = ?"
        params.append(watch)
    rows = index.read(f"SELECT * FROM library_alerts WHERE {where} ORDER BY id LIMIT ?",
                      [*params, int(limit)])
    return [alert_dict(r) for r in rows]


def latest_alerts(index: Any, limit: int = 50) -> list[dict[str, Any]]:
    """The newest alerts first (the app's alerts section)."""
    create_tables(index)
    return [alert_dict(r) for r in index.read(
        "SELECT * FROM library_alerts ORDER BY id DESC LIMIT ?", (int(limit),))]


def alert_dict(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["evidence"] = json.loads(out.pop("evidence_json") or "[]")
    return out


class StandingChecks:
    """The statements of one ``FolderWatcher``: a check per analysed clip, alerts from its
    curve. Installs itself as the watcher's ``on_done``; ``step()`` follows the checks."""

    def __init__(self, manager: Any, store: Any, watcher: Any) -> None:
        self.manager, self.store, self.watcher = manager, store, watcher
        self.settings, self.index = watcher.settings, watcher.index
        create_tables(self.index)
        watcher.on_done = self.clip_done
        self.backfill()
        self._backfilled = time.monotonic()

    def backfill(self) -> int:
        """Clips this watch finished that have no check for one of today's statements (a
        statement added or edited since, or a claim lost to a busy store): each gets one,
        claimed here and submitted by the next ``step()``. Returns how many were claimed.
        Once each: a claim is a row keyed by (watch, clip, statement), so a restart claims
        nothing again; a clip whose file is gone is left (checked if it comes back). Reads
        first and writes only when there is something to claim (``step`` runs it often)."""
        todo = self._unchecked()
        claimed = 0
        if todo:
            with self.index.write() as conn:
                for statement, key, path in todo:
                    claimed += conn.execute(
                        "INSERT OR IGNORE INTO library_alert_checks VALUES "
                        "(?, ?, ?, ?, NULL, 'claimed')",
                        (self.settings.watch_id, key, statement, path)).rowcount
        if claimed:
            log.info("watch %s: %d check(s) of clips done before, for new statements",
                     self.settings.watch_id, claimed)
        return claimed

    def _unchecked(self) -> list[tuple[str, str, str]]:
        """(statement, clip key, path) of this watch's analysed clips, still on disk, that
        have no check of a statement."""
        import os

        return [(statement, key, path) for statement in self.settings.statements
                for key, path in self.index.read(
                    "SELECT f.key, f.path FROM library_watch_files f WHERE f.watch = ? AND "
                    "f.state = 'done' AND NOT EXISTS (SELECT 1 FROM library_alert_checks c "
                    "WHERE c.watch = f.watch AND c.clip_key = f.key AND c.statement = ?)",
                    (self.settings.watch_id, statement)) if os.path.isfile(path)]

    def clip_done(self, row: dict[str, Any], doc: dict[str, Any]) -> None:
        """A clip the watch analysed: one entail job per statement (once per clip)."""
        for statement in self.settings.statements:
            with self.index.write() as conn:
                cur = conn.execute("INSERT OR IGNORE INTO library_alert_checks VALUES "
                                   "(?, ?, ?, ?, NULL, 'claimed')",
                                   (self.settings.watch_id, row["key"], statement, row["path"]))
            if cur.rowcount == 1:
                self._submit(row["key"], row["path"], statement)

    def _submit(self, clip_key: str, path: str, statement: str) -> None:
        from chord_core.analysis.request import AnalysisRequest
        from chord_core.runtime.jobs import JobSpec

        job_id = self.manager.submit(JobSpec(AnalysisRequest(path, "entail", statement),
                                             model=self.settings.model))
        self._set(clip_key, statement, "submitted", job_id)

    def _set(self, clip_key: str, statement: str, state: str, job_id: str | None = None) -> None:
        with self.index.write() as conn:
            conn.execute("UPDATE library_alert_checks SET state = ?, job_id = COALESCE(?, "
                         "job_id) WHERE watch = ? AND clip_key = ? AND statement = ?",
                         (state, job_id, self.settings.watch_id, clip_key, statement))

    def busy(self) -> bool:
        """Checks claimed or running, or analysed clips still to be claimed (a claim lost to
        a busy store: the next backfill takes them)."""
        return bool(self._checks("submitted") or self._checks("claimed") or self._unchecked())

    def _checks(self, state: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.index.read(
            "SELECT * FROM library_alert_checks WHERE watch = ? AND state = ?",
            (self.settings.watch_id, state))]

    def step(self) -> list[dict[str, Any]]:
        """Checks whose job ended become alerts (new ones returned, hooks run); every
        BACKFILL_EVERY_S, clips done with no check claimed are claimed (``backfill``)."""
        if time.monotonic() - self._backfilled >= BACKFILL_EVERY_S:
            self.backfill()
            self._backfilled = time.monotonic()
        for row in self._checks("claimed"):  # claimed before a restart, never submitted
            self._submit(row["clip_key"], row["path"], row["statement"])
        fired = []
        for row in self._checks("submitted"):
            state, _ = self.watcher._job_state(row["job_id"])  # noqa: SLF001 — same lookup
            if state == "done":
                doc = self.store.get_result(row["job_id"]) or {}
                frames = (doc.get("entailment") or {}).get("frames") or []
                fired += self._fire(row, moments(frames, self.settings.threshold))
                self._set(row["clip_key"], row["statement"], "done")
            elif state in ("failed", "cancelled"):
                self._set(row["clip_key"], row["statement"], "error")
        return fired

    def _fire(self, check: dict[str, Any], found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        fired = []
        for m in found:
            alert_id = store_alert(self.index, self.settings.watch_id, check, m)
            if alert_id is None:
                continue  # fired before (this clip, this moment)
            alert = {"id": alert_id, "watch": self.settings.watch_id, **check, **m}
            log.warning("alert: %s at %.1f–%.1f s in %s (P=%.2f)", check["statement"],
                        m["start_s"], m["end_s"], check["path"], m["probability"])
            if self.settings.hook:
                self._hook(alert)
            fired.append(alert)
        return fired

    def _hook(self, alert: dict[str, Any]) -> None:
        try:
            done = subprocess.run(shlex.split(self.settings.hook), input=json.dumps(alert),
                                  text=True, capture_output=True, timeout=HOOK_TIMEOUT_S,
                                  check=False)
            status = f"exit {done.returncode}"
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            status = f"not run: {exc}"
        if status != "exit 0":
            log.warning("alert hook %r: %s", self.settings.hook, status)
        with self.index.write() as conn:
            conn.execute("UPDATE library_alerts SET hook = ? WHERE id = ?",
                         (status, alert["id"]))


__all__ = ["StandingChecks", "moments", "list_alerts", "latest_alerts", "store_alert",
           "listen_for_alerts"]
