"""The library's full-text index: SQLite FTS5 tables inside the job store's own file.

    library_passages (id, source, kind, task, video_path, folder, name, t0, t1, made_at, day,
                      model, verdict, found)           one row per passage (passages.py)
    library_fts      FTS5 (text, place, tags), rowid = library_passages.id; ranked by bm25
                     with the text weighted over the file name and folder; ``tags`` holds
                     the filters as tokens (folders, day/month/year, task), so a filter is
                     one more term FTS5 intersects, not a scan of the matches
    library_runs     long-video runs whose chapters document is indexed
    library_meta     the watermark: the last indexed result's (created_at, job_id)

How it stays current: **lazily, by a watermark** over the store's ``results`` rows, not by a
hook in the runtime (which other code owns and changes). ``sync()`` reads the results saved
since the watermark (an index on ``results(created_at)`` makes that one seek, so it is run
before every search), indexes the done jobs' passages, and moves the watermark; a result
saved again (a retried job) has a new ``created_at`` and is indexed again, replacing its
passages. ``rebuild()`` drops the index and reads the whole store. The tables (these and
every other library table) are made and migrated by ``schema.py`` when the index opens the
file; the store's own schema is untouched.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from chord_core.errors import StoreError
from chord_core.library.passages import Passage, chapters_passages, result_passages
from chord_core.library.schema import migrate

log = logging.getLogger(__name__)

SYNC_BATCH = 500  # results read per transaction: a rebuild of 100k results commits often
# Chapters documents are looked for at most this often: finding the runs not yet indexed
# walks the store's long-video batch ids, which a search should not pay for every time.
RUNS_CHECK_S = 10.0
MMAP_BYTES = 1 << 30
CACHE_KIB = 32 * 1024
_INSERT = ("INSERT INTO library_passages (source, kind, task, video_path, folder, name, t0, "
           "t1, made_at, day, model, verdict, found) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)")


def store_path(store: Any) -> Path:
    """The SQLite file of a ``Store`` (or of a ``SharedStore`` around one), or a path."""
    inner = getattr(store, "inner", store)
    return Path(getattr(inner, "path", inner))


class LibraryIndex:
    """The index over one store file. Thread-safe (one connection behind a lock); several
    processes may index and search the same file (WAL, writes in BEGIN IMMEDIATE)."""

    def __init__(self, path: str | Path) -> None:
        from chord_core.runtime.store_read import StoreView

        self.path = Path(path)
        StoreView.open(self.path).close()  # the store's tables exist (a damaged file: fixed)
        self._lock = threading.RLock()
        self.sync_lock = threading.Lock()  # one catch-up at a time (library/catch_up.py)
        self.catch_up_thread: threading.Thread | None = None  # indexing behind (catch_up.py)
        self._runs_checked = -RUNS_CHECK_S
        # search.doc_freq's counts, by word: (passages in all when counted, count)
        self.df_cache: dict[str, tuple[int, int]] = {}
        try:
            self._conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise self._failure("opened", exc) from None
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA busy_timeout = 5000")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            # Searches read the FTS5 lists and passage text straight from the mapped file and
            # keep the hot pages in a larger cache than SQLite's 2 MiB default (measured at
            # 1M passages: mean CPU per search 21 → 19 ms).
            self._conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
            self._conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            with self.write() as conn:
                migrate(conn)  # every library table (schema.py), once per connection
        except BaseException as exc:  # no connection left open behind a failed start
            self._conn.close()
            if isinstance(exc, sqlite3.DatabaseError):
                raise self._failure("opened", exc) from None
            raise

    def _failure(self, what: str, exc: Exception) -> StoreError:
        return StoreError(f"the library index in {self.path} could not be {what}: {exc}",
                          hint="check the disk that holds it; `python -m chord_core search "
                               "--rebuild` makes it again from the job store")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the index's connection."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.DatabaseError):
                    raise self._failure("written", exc) from None
                raise

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.OperationalError as exc:
                if "fts5" in str(exc).lower():  # a query FTS5 cannot parse: the caller's
                    raise
                raise self._failure("read", exc) from None

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """The connection, held for several reads in a row (a cursor stepped while other
        statements read beside it: ``search._checked_window``), errors as ``read``'s."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.OperationalError as exc:
                if "fts5" in str(exc).lower():
                    raise
                raise self._failure("read", exc) from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> LibraryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing passages ------------------------------------------------------------------
    @staticmethod
    def add(conn: sqlite3.Connection, passages: Sequence[Passage]) -> None:
        """Insert passages (inside the caller's transaction)."""
        for p in passages:
            cur = conn.execute(_INSERT, (p.source, p.kind, p.task, p.video_path, p.folder,
                                         p.name, p.t0, p.t1, p.made_at, p.day, p.model,
                                         p.verdict, int(p.found)))
            conn.execute("INSERT INTO library_fts (rowid, text, place, tags) "
                         "VALUES (?, ?, ?, ?)", (cur.lastrowid, p.text, p.place, p.tags))

    @staticmethod
    def drop_source(conn: sqlite3.Connection, source: str) -> None:
        """Remove a job's or run's passages (inside the caller's transaction)."""
        conn.execute("DELETE FROM library_fts WHERE rowid IN "
                     "(SELECT id FROM library_passages WHERE source = ?)", (source,))
        conn.execute("DELETE FROM library_passages WHERE source = ?", (source,))

    # -- keeping up with the store ----------------------------------------------------------
    def _watermark(self) -> tuple[float, str]:
        rows = self.read("SELECT value FROM library_meta WHERE key = 'watermark'")
        if not rows:
            return (-1.0, "")
        at, job = json.loads(rows[0]["value"])
        return float(at), str(job)

    def sync(self, runs: bool | None = None) -> int:
        """Index what the store saved since the last sync; returns passages added.
        Long-video chapters runs are looked for when ``runs``, or (None) every
        RUNS_CHECK_S seconds."""
        added, more = 0, True
        while more:
            step, more = self.sync_step()
            added += step
        if runs or (runs is None and time.monotonic() - self._runs_checked >= RUNS_CHECK_S):
            self._runs_checked = time.monotonic()
            added += self._sync_runs()
        return added

    def sync_step(self, batch: int | None = None) -> tuple[int, bool]:
        """Index at most ``batch`` (SYNC_BATCH) of the results saved since the last sync (one
        transaction): (passages added, whether more may be waiting). A caller that must
        stay responsive takes small steps one at a time (``library.catch_up``)."""
        batch = SYNC_BATCH if batch is None else batch
        at, job = self._watermark()
        rows = self.read(
            "SELECT r.job_id, r.created_at, r.result_json, j.state, j.video_path, j.task, "
            "j.finished_at, j.video_name FROM results r JOIN jobs j ON j.job_id = r.job_id "
            "WHERE (r.created_at, r.job_id) > (?, ?) "  # a row value: one index seek
            "ORDER BY r.created_at, r.job_id LIMIT ?", (at, job, batch))
        if not rows:
            return 0, False
        return self._index_results(rows), len(rows) >= batch

    def _index_results(self, rows: Sequence[sqlite3.Row]) -> int:
        added = 0
        with self.write() as conn:
            for row in rows:
                self.drop_source(conn, row["job_id"])
                if row["state"] != "done":
                    continue  # a cancelled job's partial frames: indexed once it is done
                try:
                    doc = json.loads(row["result_json"])
                except ValueError:
                    log.warning("job %s: its stored result is not JSON; not indexed",
                                row["job_id"])
                    continue
                passages = result_passages(dict(row), doc, row["finished_at"]
                                           or row["created_at"])
                self.add(conn, passages)
                added += len(passages)
            last = rows[-1]
            conn.execute("INSERT INTO library_meta (key, value) VALUES ('watermark', ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         (json.dumps([last["created_at"], last["job_id"]]),))
        return added

    def _sync_runs(self) -> int:
        """Long-video chapters runs whose document is new: done parent jobs (``lvc-…`` job
        rows whose spec says ``long_run: chapters``), and the batch rows older stores kept."""
        rows = self.read(
            "SELECT j.job_id AS batch_id, COALESCE(j.finished_at, j.submitted_at) AS "
            "created_at, j.summary_json FROM jobs j WHERE j.job_id >= 'lvc-' AND "
            "j.job_id < 'lvc.' AND j.state = 'done' AND "
            "json_extract(j.spec_json, '$.long_run') = 'chapters' AND "
            "j.job_id NOT IN (SELECT source FROM library_runs) AND "
            "j.summary_json LIKE '%\"document\"%' UNION ALL "
            "SELECT b.batch_id, b.created_at, b.summary_json FROM batches b "
            "WHERE b.batch_id >= 'lvc-' AND b.batch_id < 'lvc.' "
            "AND b.batch_id NOT IN (SELECT source FROM library_runs) "
            "AND b.summary_json LIKE '%\"document\"%'")
        added = 0
        for row in rows:
            try:
                doc = (json.loads(row["summary_json"]) or {}).get("document") or {}
            except ValueError:
                doc = {}
            if doc.get("schema") != "chord.chapters/v1":
                continue
            passages = chapters_passages(row["batch_id"], doc, row["created_at"])
            with self.write() as conn:
                self.drop_source(conn, row["batch_id"])
                self.add(conn, passages)
                conn.execute("INSERT OR REPLACE INTO library_runs VALUES (?, ?)",
                             (row["batch_id"], time.time()))
            added += len(passages)
        return added

    def rebuild(self) -> int:
        """Drop every passage and index the whole store again; returns passages indexed."""
        with self.write() as conn:
            conn.execute("DELETE FROM library_fts")
            conn.execute("DELETE FROM library_passages")
            conn.execute("DELETE FROM library_runs")
            conn.execute("DELETE FROM library_meta WHERE key = 'watermark'")
        self.df_cache.clear()
        return self.sync(runs=True)

    def forget_missing(self, sources: Sequence[str]) -> list[str]:
        """Of ``sources``, those the store no longer has (a deleted job): their passages are
        dropped. Returns them."""
        gone = [s for s in dict.fromkeys(sources) if not self.read(
            "SELECT 1 FROM jobs WHERE job_id = ? UNION ALL SELECT 1 FROM batches "
            "WHERE batch_id = ? LIMIT 1", (s, s))]
        if gone:
            with self.write() as conn:
                for source in gone:
                    self.drop_source(conn, source)
                    conn.execute("DELETE FROM library_runs WHERE source = ?", (source,))
            self.df_cache.clear()  # passages gone: the highest id need not move
        return gone

    def totals(self) -> tuple[int, tuple[float, float]]:
        """Passages (the highest id: a seek, not a count) and the average tokens per text
        and place field (FTS5's own running totals), for BM25."""
        top = self.read("SELECT MAX(id) FROM library_passages")[0][0] or 0
        avg = (20.0, 6.0)
        rows = self.read("SELECT block FROM library_fts_data WHERE id = 1")
        if rows and top:
            avg = _averages(bytes(rows[0][0]), avg)
        return int(top), avg

    def stats(self) -> dict[str, Any]:
        """Passages, distinct clips and the file's size, for the CLI and the benchmark."""
        row = self.read("SELECT COUNT(*) AS n, COUNT(DISTINCT video_path) AS clips "
                        "FROM library_passages")[0]
        return {"passages": int(row["n"]), "clips": int(row["clips"]),
                "file_bytes": self.path.stat().st_size}


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's variable-length integer at ``at``: (value, next offset)."""
    value = 0
    for i in range(9):
        byte = data[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return value, at + 9


def _averages(block: bytes, default: tuple[float, float]) -> tuple[float, float]:
    """Average tokens of the text and place columns from FTS5's averages record (row id 1
    of the ``_data`` table: the row count, then each column's token total, as varints)."""
    try:
        rows, at = _varint(block, 0)
        text, at = _varint(block, at)
        place, _ = _varint(block, at)
    except IndexError:
        return default
    return (text / rows, place / rows) if rows else default
