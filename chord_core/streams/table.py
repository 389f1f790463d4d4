"""The live streams' rows, in the job store's own file (beside the library's tables, and made
with them by ``library/schema.py``):

    live_streams (id, shown, kind, state, last_error, settings_json, status_json,
                  started_at, stopped_at)          one per stream; ``shown`` is the masked URL
    live_chunks  (stream_id, seq, path, start_wall, duration_s, bytes, cut, jobs_json,
                  state, alerts)                   one per recorded segment (= chunk)

No credentials are ever written: a stream's full URL lives in the process that reads it.
A stopped stream keeps its rows, its recordings and its jobs' results.
"""

from __future__ import annotations

import json
import time
from typing import Any

from chord_core.streams.segments import Segment


class StreamTable:
    """Reads and writes the two tables through a ``LibraryIndex`` (its write lock and
    connection settings: one SQLite file, one way to write it)."""

    def __init__(self, index: Any) -> None:
        self.index = index  # its tables were made when it opened (library/schema.py)

    def opened(self, stream_id: str, shown: str, kind: str, settings: dict[str, Any]) -> None:
        with self.index.write() as conn:
            conn.execute(
                "INSERT INTO live_streams (id, shown, kind, state, settings_json, started_at) "
                "VALUES (?, ?, ?, 'connecting', ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "shown = excluded.shown, state = 'connecting', last_error = '', "
                "settings_json = excluded.settings_json, started_at = excluded.started_at, "
                "stopped_at = NULL", (stream_id, shown, kind, json.dumps(settings), time.time()))

    def status(self, stream_id: str, status: dict[str, Any]) -> None:
        with self.index.write() as conn:
            conn.execute("UPDATE live_streams SET state = ?, last_error = ?, status_json = ?, "
                         "stopped_at = CASE WHEN ? IN ('stopped', 'failed') THEN ? ELSE NULL "
                         "END WHERE id = ?",
                         (status["state"], status["last_error"], json.dumps(status),
                          status["state"], time.time(), stream_id))

    def chunk(self, seg: Segment, jobs: dict[str, Any]) -> None:
        with self.index.write() as conn:
            conn.execute("INSERT OR REPLACE INTO live_chunks (stream_id, seq, path, start_wall, "
                         "duration_s, bytes, cut, jobs_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         (seg.stream_id, seg.seq, seg.path, seg.start_wall, seg.duration_s,
                          seg.bytes, seg.cut, json.dumps(jobs)))

    def chunk_done(self, stream_id: str, path: str, state: str, alerts: int) -> None:
        with self.index.write() as conn:
            conn.execute("UPDATE live_chunks SET state = ?, alerts = alerts + ? "
                         "WHERE stream_id = ? AND path = ?", (state, alerts, stream_id, path))

    def deleted(self, paths: list[str]) -> None:
        if paths:
            with self.index.write() as conn:
                conn.executemany("UPDATE live_chunks SET state = 'deleted' WHERE path = ?",
                                 [(p,) for p in paths])

    def streams(self) -> list[dict[str, Any]]:
        return [_stream(r) for r in self.index.read(
            "SELECT * FROM live_streams ORDER BY started_at DESC")]

    def stream(self, stream_id: str) -> dict[str, Any] | None:
        rows = self.index.read("SELECT * FROM live_streams WHERE id = ?", (stream_id,))
        return _stream(rows[0]) if rows else None

    def chunks(self, stream_id: str, limit: int = 50) -> list[dict[str, Any]]:
        rows = self.index.read("SELECT * FROM live_chunks WHERE stream_id = ? "
                               "ORDER BY start_wall DESC LIMIT ?", (stream_id, int(limit)))
        out = []
        for r in rows:
            row = dict(r)
            row["jobs"] = json.loads(row.pop("jobs_json") or "{}")
            out.append(row)
        return out


def _stream(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["settings"] = json.loads(out.pop("settings_json") or "{}")
    out["status"] = json.loads(out.pop("status_json") or "{}")
    return out


__all__ = ["StreamTable"]
