"""The watch folders' bookkeeping, in the job store's file (tables made here):

    library_watch_files (watch, key, path, size, mtime_ns, state, job_id, error, owner,
                         updated_at)   one row per file content analysed with a watch's
                                       settings; PRIMARY KEY (watch, key)
    library_watch_seen  (watch, path, size, mtime_ns, key)   path → key, so a rescan does
                                       not hash a file whose size and mtime are unchanged

``key`` is the request key (``runtime.batch.request_key``: the file's sha256 + task, query,
model, sampling): a renamed file has the same key (not analysed again), an edited one a new
key (analysed once more). A file is **claimed** by inserting its row (``INSERT OR IGNORE``
in one ``BEGIN IMMEDIATE`` transaction: of two watchers only one gets it), then
``submitted`` with its job id, then ``done`` or ``error`` (with the message). A claim left by
a process that died before submitting is taken over by the next watcher start.

States: claimed → submitted → done | error; error rows are kept (the file is not retried
until it changes: a new key).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from chord_core.library.index import LibraryIndex

_DDL = """
CREATE TABLE IF NOT EXISTS library_watch_files (
    watch TEXT NOT NULL, key TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, state TEXT NOT NULL, job_id TEXT, error TEXT,
    owner TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (watch, key));
CREATE INDEX IF NOT EXISTS library_watch_files_state ON library_watch_files (watch, state);
CREATE TABLE IF NOT EXISTS library_watch_seen (
    watch TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    key TEXT NOT NULL, PRIMARY KEY (watch, path));
"""


def owner_id() -> str:
    """This process, as a claim's owner: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool:
    """Whether a claim's owner still runs (a process on another host is assumed alive)."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WatchTable:
    """One watch's rows, over a ``LibraryIndex``'s connection (same file, same lock)."""

    def __init__(self, index: LibraryIndex, watch: str) -> None:
        self.index, self.watch, self.owner = index, watch, owner_id()
        with index.write() as conn:
            for statement in _DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)

    def known_key(self, path: str, size: int, mtime_ns: int) -> str | None:
        rows = self.index.read("SELECT key FROM library_watch_seen WHERE watch = ? AND path = ? "
                               "AND size = ? AND mtime_ns = ?", (self.watch, path, size,
                                                                 mtime_ns))
        return str(rows[0]["key"]) if rows else None

    def remember(self, path: str, size: int, mtime_ns: int, key: str) -> None:
        with self.index.write() as conn:
            conn.execute("INSERT OR REPLACE INTO library_watch_seen VALUES (?, ?, ?, ?, ?)",
                         (self.watch, path, size, mtime_ns, key))

    def claim(self, key: str, path: str, size: int, mtime_ns: int) -> bool:
        """Take the file for this process; False when a row for its content exists (done,
        failed, or another watcher's). A renamed file's row follows it to its new path."""
        with self.index.write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO library_watch_files (watch, key, path, size, mtime_ns, "
                "state, owner, updated_at) VALUES (?, ?, ?, ?, ?, 'claimed', ?, ?)",
                (self.watch, key, path, size, mtime_ns, self.owner, time.time()))
            if cur.rowcount == 1:
                return True
            conn.execute("UPDATE library_watch_files SET path = ? WHERE watch = ? AND key = ? "
                         "AND path != ?", (path, self.watch, key, path))
            return False

    def take_over_orphans(self) -> list[dict[str, Any]]:
        """Claims whose owner died before submitting: now this process's (returned)."""
        rows = self.index.read("SELECT * FROM library_watch_files WHERE watch = ? AND "
                               "state = 'claimed'", (self.watch,))
        mine = []
        for row in rows:
            if row["owner"] == self.owner or not owner_alive(row["owner"]):
                with self.index.write() as conn:
                    conn.execute("UPDATE library_watch_files SET owner = ?, updated_at = ? "
                                 "WHERE watch = ? AND key = ?",
                                 (self.owner, time.time(), self.watch, row["key"]))
                mine.append(dict(row))
        return mine

    def mark(self, key: str, state: str, *, job_id: str | None = None,
             error: str | None = None) -> None:
        with self.index.write() as conn:
            conn.execute("UPDATE library_watch_files SET state = ?, job_id = COALESCE(?, "
                         "job_id), error = ?, updated_at = ? WHERE watch = ? AND key = ?",
                         (state, job_id, error, time.time(), self.watch, key))

    def rows(self, state: str | None = None) -> list[dict[str, Any]]:
        where, params = "watch = ?", [self.watch]
        if state is not None:
            where += " AND state = ?"
            params.append(state)
        return [dict(r) for r in self.index.read(
            f"SELECT * FROM library_watch_files WHERE {where} ORDER BY updated_at", params)]
