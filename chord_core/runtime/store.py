"""Jobs, results and batches kept in SQLite, so history and batches survive restarts.

    batches (batch_id, created_at, out_dir, summary_json)
    jobs    (job_id, batch_id, key, state, video_path, video_name, task, query, model,
             spec_json, submitted_at, started_at, finished_at, worker, attempts,
             error_json, progress_json, owner, parent, summary_json: see store_parents.py)
    owners  (owner_id, pid, host, proc_start, label, started_at, heartbeat_at, expires_at)
    results (job_id → jobs, result_json = the chord.result/v1 document, created_at)

One ``Store`` is shared by the job manager thread and Streamlit script threads: it keeps one
connection behind a lock. Several processes may open the same file: WAL journal, a 5 s busy
timeout, and every write in a ``BEGIN IMMEDIATE`` transaction (it takes the write lock up
front, so two writers wait for each other instead of failing with "database is locked").

States: queued → running → done | failed | cancelled; running → queued (claimed after
its owner died, ``leases.py``); failed | cancelled → queued (retry). ``done`` is only reached through
``save_result``, so a done job always has its result; a cancelled job may have one too
(``save_result(state="cancelled")``: the frames it finished, marked ``partial``). Times are seconds since the epoch.

Damage: a store file that is empty (0 bytes), not SQLite at all, or fails SQLite's quick
check is moved aside as ``chord.sqlite3.corrupt-<time>`` and a fresh store is started; the
warning is logged and kept in ``Store.notices`` for the UI and CLI to show. A new store file is
built under a temporary name and linked into place, so an empty file at ``path`` is never a
store being created. A write that fails (disk full, I/O error) raises ``StoreError``.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from chord_core.config import default_data_dir
from chord_core.errors import ChordError, StoreError
from chord_core.media.content_keys import content_key, file_hash
from chord_core.runtime.store_repair import (
    create_atomically,
    is_damage,
    move_aside,
    rollback,
)
from chord_core.runtime.store_rows import BatchRow, JobRow
from chord_core.runtime.store_schema import migrate
from chord_core.runtime.store_states import (  # noqa: F401 — STATES, NotOwner: the store's API
    STATES,
    TRANSITIONS,
    NotOwner,
    current_state,
    state_columns,
    state_name,
)
from chord_core.types import SCHEMA

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
_JOB_COLUMNS = ("job_id", "batch_id", "key", "state", "video_path", "video_name", "task",
                "query", "model", "spec_json", "submitted_at", "started_at", "finished_at",
                "worker", "attempts", "error_json", "progress_json", "owner", "parent",
                "summary_json")


def default_store_path() -> Path:
    return default_data_dir() / "chord.sqlite3"


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


def _private_parent(path: Path) -> None:
    """Create the store's folder (the data dir) readable by this user only (0700)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)  # mkdir's mode is masked by the umask


class Store:
    """The SQLite store. Thread-safe; plain dicts in and out."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self._lock = threading.RLock()
        self.notices: list[str] = []  # what the user should be told (a store moved aside)
        self._conn: sqlite3.Connection | None = self._open()

    # -- connection -----------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        """Open the store; a damaged one is moved aside and replaced by a fresh one."""
        try:
            _private_parent(self.path)
            if not self.path.exists():
                self._create()
            elif self.path.stat().st_size == 0:
                self._move_aside("it is empty (0 bytes)")
            try:
                return self._connect(self.path, check=True)
            except sqlite3.DatabaseError as exc:
                if not is_damage(exc):
                    raise
                self._move_aside(f"it is damaged: {exc}")
                return self._connect(self.path, check=True)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise ChordError(f"cannot open the job store {self.path}: {exc}",
                             hint="check that its folder is writable and its disk not full; "
                                  "or set CHORD_DATA_DIR to another folder") from None

    def _create(self) -> None:
        create_atomically(self.path, lambda tmp: self._connect(tmp, check=False).close())

    def _move_aside(self, reason: str) -> None:
        """Keep the damaged file, start a fresh store, and remember to tell the user."""
        self.notices.append(move_aside(self.path, reason))
        self._create()

    def _connect(self, path: Path, *, check: bool) -> sqlite3.Connection:
        """A configured connection with the schema in place; ``check`` runs SQLite's quick
        integrity check first (raising DatabaseError on damage)."""
        conn = None
        try:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
            os.chmod(path, 0o600)  # history and results: this user only (WAL/SHM follow)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("%s: journal mode is %s, not WAL (network file system?)",
                            self.path, mode)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            if check:
                verdict = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
                if verdict != ["ok"]:
                    raise sqlite3.DatabaseError("integrity check failed: " + "; ".join(verdict))
            migrate(conn, self.path)
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        return conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ChordError(f"the job store {self.path} is closed",
                             hint="this is a bug in Chord: a closed Store was used")
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all or nothing (``transaction``: for ``store_parents``)."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                rollback(conn)
                if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                        exc, sqlite3.IntegrityError):
                    raise self._failure("written", exc) from None
                raise

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchall()
            except sqlite3.DatabaseError as exc:
                raise self._failure("read", exc) from None

    def read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        """Rows of one read-only query, for the store's own query modules
        (``store_history``) that build SQL the store's fixed methods do not have. Only a
        SELECT is taken: writes go through the manager (``transaction``). A failed read is a
        StoreError, as for every other read."""
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            raise ValueError("Store.read takes a SELECT query only")
        return self._read(sql, params)

    def _failure(self, what: str, exc: sqlite3.DatabaseError) -> StoreError:
        return StoreError(f"the job store {self.path} could not be {what}: {exc}",
                          hint=f"free space on the disk that holds {self.path.parent} (or set "
                               "CHORD_DATA_DIR to a folder on another disk); jobs keep running "
                               "and result files already written are safe")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def journal_mode(self) -> str:
        return str(self._read("PRAGMA journal_mode")[0][0]).lower()

    @property
    def schema_version(self) -> int:
        return int(self._read("SELECT MAX(version) FROM schema_version")[0][0])

    # -- jobs -----------------------------------------------------------------------------
    def add_job(self, job_id: str, *, video_path: str, task: str, query: str = "",
                model: str = "", key: str = "", spec: Mapping[str, Any] | None = None,
                batch_id: str | None = None, video_name: str | None = None,
                state: str = "queued", submitted_at: float | None = None,
                owner: str | None = None, parent: str | None = None) -> None:
        """Record a new job (``queued`` unless told otherwise), run by the lease ``owner``. A
        known ``job_id`` raises, but a ``parent``'s chunk job not done is queued again with
        this spec (a resumed run)."""
        row = {"job_id": job_id, "batch_id": batch_id, "key": key, "state": state_name(state),
               "owner": owner,
               "video_path": str(video_path),
               "video_name": video_name if video_name is not None else Path(video_path).name,
               "task": task, "query": query, "model": model,
               "spec_json": _dumps(dict(spec or {})),
               "submitted_at": time.time() if submitted_at is None else submitted_at,
               "parent": parent}
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        again = (" ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, spec_json = "
                 "excluded.spec_json, parent = excluded.parent, owner = excluded.owner, "
                 "started_at = NULL, finished_at"
                 " = NULL, worker = NULL, error_json = NULL, progress_json = NULL "
                 "WHERE jobs.state <> 'done'"
                 if parent is not None else "")
        try:
            with self._write() as conn:
                conn.execute(f"INSERT INTO jobs ({names}) VALUES ({marks}){again}",
                             tuple(row.values()))
        except sqlite3.IntegrityError:
            raise ValueError(f"job {job_id!r} already exists in {self.path}") from None

    def update_state(self, job_id: str, state: str, *, worker: str | None = None,
                     error: Mapping[str, Any] | None = None,
                     progress: Mapping[str, Any] | None = None,
                     owner: str | None = None) -> None:
        """Move a job to ``state`` (see TRANSITIONS) and record worker, error or progress.
        Given an ``owner``, the row must be that lease's (else ``NotOwner``).

        Entering ``running`` stamps ``started_at`` and counts an attempt; a finished state
        stamps ``finished_at``. Raises KeyError for an unknown job, ValueError for a move
        that is not allowed (e.g. ``done`` → anything; use ``save_result`` for ``done``)."""
        new = state_name(state)
        with self._write() as conn:
            old = current_state(conn, job_id, owner)
            if new != old and new not in TRANSITIONS[old]:
                raise ValueError(f"job {job_id} cannot go from {old} to {new}"
                                 + (" (use save_result)" if new == "done" else ""))
            sets, params = state_columns(old, new)
            for column, value in (("worker", worker), ("error_json", _dumps(error)),
                                  ("progress_json", _dumps(progress))):
                if value is not None:
                    sets.append(f"{column} = ?")
                    params.append(value)
            conn.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE job_id = ?",
                         (*params, job_id))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: the write lock up front) for the
        store's own modules (``leases.py``): all of it or nothing."""
        with self._write() as conn:
            yield conn

    def save_result(self, job_id: str, result: Mapping[str, Any] | Any, *,
                    state: str = "done", owner: str | None = None) -> None:
        """Store the job's ``chord.result/v1`` document and mark it done — one transaction.
        Saving again replaces the stored result (never a second copy). ``state``
        "cancelled": a cancelled job's partial result (the job stays cancelled)."""
        doc = result.to_dict() if hasattr(result, "to_dict") else dict(result)
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document (schema={doc.get('schema')!r})")
        if state not in ("done", "cancelled"):
            raise ValueError(f"a result is saved as done or cancelled, not {state!r}")
        text = json.dumps(doc, ensure_ascii=False)
        with self._write() as conn:
            old = current_state(conn, job_id, owner)
            if old not in ("queued", "running", state):
                raise ValueError(f"job {job_id} is {old}; a result cannot be saved for it")
            now = time.time()
            conn.execute(
                "INSERT INTO results (job_id, result_json, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (job_id) DO UPDATE SET result_json = excluded.result_json, "
                "created_at = excluded.created_at", (job_id, text, now))
            conn.execute("UPDATE jobs SET state = ?, finished_at = COALESCE(?, finished_at), "
                         "error_json = NULL WHERE job_id = ?",
                         (state, now if old != state or state == "done" else None, job_id))

    def get_job(self, job_id: str) -> JobRow | None:
        rows = self._read(f"SELECT {', '.join(_JOB_COLUMNS)} FROM jobs WHERE job_id = ?",
                          (job_id,))
        return _job_dict(rows[0]) if rows else None

    def get_result(self, job_id: str) -> dict[str, Any] | None:
        rows = self._read("SELECT result_json FROM results WHERE job_id = ?", (job_id,))
        doc: dict[str, Any] | None = json.loads(rows[0]["result_json"]) if rows else None
        return doc

    def find_done(self, key: str) -> str | None:
        """The newest finished job with this content key and a stored result, if any."""
        if not key:
            return None
        rows = self._read("SELECT j.job_id FROM jobs j JOIN results r ON r.job_id = j.job_id "
                          "WHERE j.key = ? AND j.state = 'done' "
                          "ORDER BY j.finished_at DESC, j.rowid DESC LIMIT 1", (key,))
        return str(rows[0]["job_id"]) if rows else None

    def list_jobs(self, limit: int = 50, offset: int = 0, state: str | None = None,
                  batch_id: str | None = None, *, top_level: bool = False,
                  parent: str | None = None) -> list[JobRow]:
        """Jobs newest first (no results); ``top_level``: no chunk jobs; ``parent``: its."""
        where, params = _filters(state, batch_id, top_level, parent)
        rows = self._read(f"SELECT {', '.join(_JOB_COLUMNS)} FROM jobs{where} "
                          "ORDER BY submitted_at DESC, rowid DESC LIMIT ? OFFSET ?",
                          (*params, int(limit), int(offset)))
        return [_job_dict(r) for r in rows]

    def count_jobs(self, state: str | None = None, batch_id: str | None = None, *,
                   top_level: bool = False, parent: str | None = None) -> int:
        where, params = _filters(state, batch_id, top_level, parent)
        return int(self._read(f"SELECT COUNT(*) FROM jobs{where}", params)[0][0])

    def delete_job(self, job_id: str) -> bool:
        """Delete a job and its result. Returns False when there was no such job."""
        with self._write() as conn:
            conn.execute("DELETE FROM results WHERE job_id = ?", (job_id,))
            return conn.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,)).rowcount > 0

    # -- batches --------------------------------------------------------------------------
    def add_batch(self, batch_id: str, out_dir: str | Path = "", *,
                  created_at: float | None = None) -> None:
        """Record a batch; adding a known ``batch_id`` again is a no-op (resumed batches)."""
        with self._write() as conn:
            conn.execute("INSERT OR IGNORE INTO batches (batch_id, created_at, out_dir) "
                         "VALUES (?, ?, ?)",
                         (batch_id, time.time() if created_at is None else created_at,
                          str(out_dir)))

    def get_batch(self, batch_id: str) -> BatchRow | None:
        """The batch with ``counts`` = number of its jobs per state."""
        rows = self._read("SELECT batch_id, created_at, out_dir, summary_json FROM batches "
                          "WHERE batch_id = ?", (batch_id,))
        if not rows:
            return None
        counts = self._read("SELECT state, COUNT(*) FROM jobs WHERE batch_id = ? "
                            "GROUP BY state", (batch_id,))
        row = rows[0]
        return BatchRow(batch_id=str(row["batch_id"]), created_at=float(row["created_at"]),
                        out_dir=str(row["out_dir"]),
                        summary=json.loads(row["summary_json"] or "null"),
                        counts={str(r[0]): int(r[1]) for r in counts})

    def set_batch_summary(self, batch_id: str, summary: Mapping[str, Any]) -> None:
        with self._write() as conn:
            cur = conn.execute("UPDATE batches SET summary_json = ? WHERE batch_id = ?",
                               (_dumps(dict(summary)), batch_id))
            if cur.rowcount == 0:
                raise KeyError(f"no batch {batch_id!r}")


def _filters(state: str | None, batch_id: str | None, top_level: bool = False,
             parent: str | None = None) -> tuple[str, tuple[Any, ...]]:
    clauses, params = ["parent IS NULL"] if top_level else [], []
    if parent is not None:
        clauses.append("parent = ?")
        params.append(parent)
    if state is not None:
        clauses.append("state = ?")
        params.append(state_name(state))
    if batch_id is not None:
        clauses.append("batch_id = ?")
        params.append(batch_id)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(params)


def _job_dict(row: sqlite3.Row) -> JobRow:
    """A ``jobs`` row (all of ``_JOB_COLUMNS``) as a ``JobRow``: its JSON columns decoded."""
    return JobRow(job_id=row["job_id"], batch_id=row["batch_id"], key=row["key"],
                  state=row["state"], video_path=row["video_path"],
                  video_name=row["video_name"], task=row["task"], query=row["query"],
                  model=row["model"], submitted_at=row["submitted_at"],
                  started_at=row["started_at"], finished_at=row["finished_at"],
                  worker=row["worker"], attempts=row["attempts"], owner=row["owner"],
                  parent=row["parent"], spec=json.loads(row["spec_json"] or "{}"),
                  error=json.loads(row["error_json"] or "null"),
                  progress=json.loads(row["progress_json"] or "null"),
                  summary=json.loads(row["summary_json"] or "null"))


__all__ = ["Store", "content_key", "file_hash", "default_store_path", "STATES"]
