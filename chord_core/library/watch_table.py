"""The watch folders' tables, in the job store's file — the one module that reads and writes
them (the watcher, the standing checks, the hook runner and the views call it; schema.py
makes and migrates them):

    library_watch_files (watch, key, path, size, mtime_ns, state, job_id, error, owner,
                         updated_at)   one row per file content analysed with a watch's
                                       settings; PRIMARY KEY (watch, key)
    library_watch_seen  (watch, path, size, mtime_ns, key)   path → key, so a rescan does
                                       not hash a file whose size and mtime are unchanged
    library_alert_checks (watch, clip_key, statement, path, job_id, state, owner, error)
                                       one standing check per clip and statement
    library_alerts      (id, watch, clip_key, statement, path, start_s, end_s, probability,
                         evidence_json, job_id, created_at, hook)   UNIQUE (watch, clip_key,
                                       statement, start_s): each moment fires once
    library_hook_runs   (id, alert_id, watch, command, started_at, duration_s, exit_code,
                         outcome, output)   one row per run of an alert's hook

``key`` is the request key (``runtime.batch.request_key``: the file's sha256 + task, query,
model, sampling): a renamed file has the same key (not analysed again), an edited one a new
key (analysed once more). A file (or a check) is **claimed** by inserting its row under the
claiming process's lease — the job manager's ``owners`` row (``runtime/leases.py``) — in one
``BEGIN IMMEDIATE`` transaction: of two watchers only one gets it. A claim whose owner is
gone is **taken over** (one conditional UPDATE on the old owner): gone as the runtime counts
it (the pid dead, or now another process: the process-start check), with no ``owners`` row
(released at a clean stop), or a lease not renewed for ``STALE_S`` (a process whose
dispatcher never runs). States: claimed → submitted → done | error; error rows are kept
(the file is not retried until it changes: a new key).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from typing import Any, Iterable, Sequence

from chord_core.library.index import LibraryIndex
from chord_core.runtime.leases import LEASE_TTL_S, owner_gone

STALE_S = 2 * LEASE_TTL_S  # a lease this long past its expiry holds no claim, on any host
OUTPUT_MAX = 2000  # characters of a hook's output kept


def gone_owners(conn: Any, owners: Iterable[str]) -> set[str]:
    """Which of ``owners`` (lease ids) hold no claim any more (the module docstring)."""
    wanted = set(owners)
    if not wanted:
        return set()
    now, host = time.time(), socket.gethostname()
    rows = {str(r["owner_id"]): r for r in conn.execute("SELECT * FROM owners")}
    return {o for o in wanted if o not in rows or owner_gone(rows[o], now, host)
            or float(rows[o]["expires_at"]) + STALE_S < now}


class WatchTable:
    """One watch's rows, over a ``LibraryIndex``'s connection (same file, same lock), claimed
    under the lease ``owner`` (the job manager's)."""

    def __init__(self, index: LibraryIndex, watch: str, owner: str) -> None:
        self.index, self.watch, self.owner = index, watch, owner

    # -- files ----------------------------------------------------------------------------
    def known_key(self, path: str, size: int, mtime_ns: int) -> str | None:
        rows = self.index.read("SELECT key FROM library_watch_seen WHERE watch = ? AND path = ? "
                               "AND size = ? AND mtime_ns = ?", (self.watch, path, size,
                                                                 mtime_ns))
        return str(rows[0]["key"]) if rows else None

    def claim_many(self, files: Sequence[tuple[str, str, int, int]]) -> list[tuple[str, str]]:
        """Take files (key, path, size, mtime_ns) for this process, in one transaction; the
        (key, path) of those taken: new contents, and claims whose owner is gone. A known
        content (done, failed, or a live watcher's) is not taken; a renamed file's row
        follows it to its new path. Each path's key is remembered (``known_key``)."""
        taken: list[tuple[str, str]] = []
        now = time.time()
        with self.index.write() as conn:
            conn.executemany("INSERT OR REPLACE INTO library_watch_seen VALUES (?, ?, ?, ?, ?)",
                             [(self.watch, p, s, m, k) for k, p, s, m in files])
            lost: list[tuple[str, str, str]] = []
            for key, path, size, mtime_ns in files:
                cur = conn.execute(
                    "INSERT OR IGNORE INTO library_watch_files (watch, key, path, size, "
                    "mtime_ns, state, owner, updated_at) VALUES (?, ?, ?, ?, ?, 'claimed', ?, ?)",
                    (self.watch, key, path, size, mtime_ns, self.owner, now))
                if cur.rowcount == 1:
                    taken.append((key, path))
                    continue
                conn.execute("UPDATE library_watch_files SET path = ? WHERE watch = ? AND "
                             "key = ? AND path != ?", (path, self.watch, key, path))
                row = conn.execute("SELECT owner, state FROM library_watch_files WHERE "
                                   "watch = ? AND key = ?", (self.watch, key)).fetchone()
                if row["state"] in ("claimed", "submitted") and row["owner"] != self.owner:
                    lost.append((key, path, str(row["owner"])))
            gone = gone_owners(conn, {o for _, _, o in lost})
            for key, path, owner in lost:
                if owner in gone and self._take(conn, "library_watch_files", "key", key, owner):
                    taken.append((key, path))
        return taken

    def held_by_others(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """(key, path) of ``keys`` claimed or submitted by another owner (still alive when
        ``claim_many`` looked): a claim to take over if that owner goes."""
        out = []
        for i in range(0, len(keys), 500):
            part = list(keys[i:i + 500])
            marks = ",".join("?" * len(part))
            out += [(str(r["key"]), str(r["path"])) for r in self.index.read(
                f"SELECT key, path FROM library_watch_files WHERE watch = ? AND owner != ? "
                f"AND state IN ('claimed', 'submitted') AND key IN ({marks})",
                [self.watch, self.owner, *part])]
        return out

    def take_over_orphans(self) -> list[dict[str, Any]]:
        """Claimed or submitted rows whose owner is gone (or is this process: a watcher it
        stopped): now this process's, returned."""
        return self._orphans("library_watch_files", "key")

    def _orphans(self, table: str, key_col: str) -> list[dict[str, Any]]:
        mine = []
        with self.index.write() as conn:
            rows = [dict(r) for r in conn.execute(
                f"SELECT * FROM {table} WHERE watch = ? AND state IN ('claimed', 'submitted')",
                (self.watch,))]
            gone = gone_owners(conn, {str(r["owner"]) for r in rows} - {self.owner})
            for row in rows:
                if row["owner"] == self.owner or (  # a watcher of this process stopped
                        row["owner"] in gone and self._take(conn, table, key_col, row[key_col],
                                                            row["owner"], row.get("statement"))):
                    mine.append(row)
        return mine

    def _take(self, conn: sqlite3.Connection, table: str, key_col: str, key: str, owner: str,
              statement: str | None = None) -> bool:
        extra, params = ("AND statement = ?", [statement]) if statement is not None else ("", [])
        cur = conn.execute(f"UPDATE {table} SET owner = ? WHERE watch = ? AND {key_col} = ? "
                           f"AND owner = ? {extra}",
                           [self.owner, self.watch, key, owner, *params])
        return cur.rowcount == 1

    def mark(self, key: str, state: str, *, job_id: str | None = None,
             error: str | None = None) -> None:
        with self.index.write() as conn:
            conn.execute("UPDATE library_watch_files SET state = ?, job_id = COALESCE(?, "
                         "job_id), error = ?, updated_at = ? WHERE watch = ? AND key = ?",
                         (state, job_id, error, time.time(), self.watch, key))

    def mark_many(self, marks: Sequence[tuple[str, str]], state: str) -> None:
        """(key, job_id) pairs set to ``state`` in one transaction."""
        now = time.time()
        with self.index.write() as conn:
            conn.executemany("UPDATE library_watch_files SET state = ?, job_id = ?, "
                             "updated_at = ? WHERE watch = ? AND key = ?",
                             [(state, j, now, self.watch, k) for k, j in marks])

    def row(self, key: str) -> dict[str, Any]:
        rows = self.index.read("SELECT * FROM library_watch_files WHERE watch = ? AND key = ?",
                               (self.watch, key))
        return dict(rows[0]) if rows else {"key": key}

    def rows(self, state: str | None = None) -> list[dict[str, Any]]:
        where, params = "watch = ?", [self.watch]
        if state is not None:
            where += " AND state = ?"
            params.append(state)
        return [dict(r) for r in self.index.read(
            f"SELECT * FROM library_watch_files WHERE {where} ORDER BY updated_at", params)]

    # -- standing checks ------------------------------------------------------------------
    def unchecked(self, statements: Sequence[str]) -> list[tuple[str, str, str]]:
        """(statement, clip key, path) of this watch's analysed clips with no check of a
        statement."""
        return [(s, str(r["key"]), str(r["path"])) for s in statements for r in self.index.read(
            "SELECT f.key, f.path FROM library_watch_files f WHERE f.watch = ? AND "
            "f.state = 'done' AND NOT EXISTS (SELECT 1 FROM library_alert_checks c "
            "WHERE c.watch = f.watch AND c.clip_key = f.key AND c.statement = ?)",
            (self.watch, s))]

    def claim_checks(self, todo: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        """Claim checks (statement, clip key, path); those this process got."""
        got = []
        with self.index.write() as conn:
            for statement, key, path in todo:
                if conn.execute("INSERT OR IGNORE INTO library_alert_checks (watch, clip_key, "
                                "statement, path, job_id, state, owner) VALUES "
                                "(?, ?, ?, ?, NULL, 'claimed', ?)",
                                (self.watch, key, statement, path, self.owner)).rowcount:
                    got.append((statement, key, path))
        return got

    def take_over_checks(self) -> list[dict[str, Any]]:
        """Claimed or submitted checks whose owner is gone: now this process's."""
        return self._orphans("library_alert_checks", "clip_key")

    def set_check(self, clip_key: str, statement: str, state: str, *,
                  job_id: str | None = None, error: str | None = None) -> None:
        with self.index.write() as conn:
            conn.execute("UPDATE library_alert_checks SET state = ?, job_id = COALESCE(?, "
                         "job_id), error = ? WHERE watch = ? AND clip_key = ? AND statement = ?",
                         (state, job_id, error, self.watch, clip_key, statement))

    def checks(self, state: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.index.read(
            "SELECT * FROM library_alert_checks WHERE watch = ? AND state = ?",
            (self.watch, state))]


# -- alerts and hook runs (any watch) ---------------------------------------------------------
def insert_alert(index: LibraryIndex, watch: str, check: dict[str, Any],
                 moment: dict[str, Any]) -> int | None:
    """Store one alert; its id, or None when this clip's moment fired before."""
    with index.write() as conn:
        cur = conn.execute(
            "INSERT OR IGNORE INTO library_alerts (watch, clip_key, statement, path, "
            "start_s, end_s, probability, evidence_json, job_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (watch, check["clip_key"], check["statement"], check["path"], moment["start_s"],
             moment["end_s"], moment["probability"], json.dumps(moment["evidence"]),
             check["job_id"], time.time()))
        return cur.lastrowid if cur.rowcount == 1 else None


def record_hook_run(index: LibraryIndex, run: dict[str, Any]) -> int:
    """Keep one hook run (``hooks.HookRun.to_dict()``) and set its outcome on the alert."""
    with index.write() as conn:
        cur = conn.execute(
            "INSERT INTO library_hook_runs (alert_id, watch, command, started_at, duration_s, "
            "exit_code, outcome, output) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run["alert_id"], run["watch"], run["command"][:500], run["started_at"],
             run["duration_s"], run["exit_code"], run["outcome"],
             run["output"][:OUTPUT_MAX]))
        conn.execute("UPDATE library_alerts SET hook = ? WHERE id = ?",
                     (run["outcome"], run["alert_id"]))
        return int(cur.lastrowid or 0)


def hook_runs(index: LibraryIndex, alert_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The latest hook run of each of ``alert_ids``."""
    if not alert_ids:
        return {}
    marks = ",".join("?" * len(alert_ids))
    rows = index.read(f"SELECT * FROM library_hook_runs WHERE alert_id IN ({marks}) "
                      "ORDER BY id", [int(a) for a in alert_ids])
    return {int(r["alert_id"]): {k: r[k] for k in ("started_at", "duration_s", "exit_code",
                                                    "outcome", "output")} for r in rows}


def alert_rows(index: LibraryIndex, *, after_id: int = 0, limit: int = 100,
               watch: str | None = None, newest: bool = False) -> list[dict[str, Any]]:
    """Alerts (oldest first over ``after_id``, or the newest first), each with its
    ``evidence`` and its latest ``hook_run`` (or None)."""
    where, params = "id > ?", list[int | str]([int(after_id)])
    if watch:
        where += " AND watch = ?"
        params.append(watch)
    order = "id DESC" if newest else "id"
    rows = [dict(r) for r in index.read(
        f"SELECT * FROM library_alerts WHERE {where} ORDER BY {order} LIMIT ?",
        [*params, int(limit)])]
    runs = hook_runs(index, [r["id"] for r in rows])
    for row in rows:
        row["evidence"] = json.loads(row.pop("evidence_json") or "[]")
        row["hook_run"] = runs.get(int(row["id"]))
    return rows


def newest_alert_id(index: LibraryIndex) -> int:
    rows = index.read("SELECT MAX(id) FROM library_alerts")
    return int(rows[0][0] or 0) if rows else 0
