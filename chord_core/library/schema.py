"""The library's tables in the job store's file, and the one place they are made and migrated
(issue 38: "the library's tables are owned by one module"). Every other module reads and
writes them with its own queries, never with CREATE, ALTER or DROP:

    index (index.py)        library_passages, library_fts (FTS5), library_runs, library_meta,
                            and library_results_by_time on the store's ``results``
    cases (cases.py)        library_cases, library_case_moments
    review (review.py)      library_review
    watches (watch_table.py, alerts.py, hooks.py)
                            library_watch_files, library_watch_seen, library_alert_checks,
                            library_alerts, library_hook_runs
    saved watches (watch_saved.py)   library_watch_saved
    live streams (streams/table.py)  live_streams, live_chunks

``migrate`` applies them, in the caller's write transaction, when a ``LibraryIndex`` opens the
file (so once per connection; every module above reaches the file through one): the
statements are ``IF NOT EXISTS`` and columns added since a table's first release
(``ADDED_COLUMNS``) are added where ``PRAGMA table_info`` lacks them — the runtime's
``store_schema.py`` way — so a file made by any older Chord opens and is brought up to date,
and applying it again changes nothing. The index is derived data: when
``library_meta.schema`` is not ``LIBRARY_SCHEMA`` its tables (``INDEX_TABLES``) are dropped
and made again, and the next sync indexes the whole store (the watermark goes with them).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

# 4: an upload is named as uploaded (the job's video_name). Another value in library_meta:
# the index's tables are made again (a rebuild).
LIBRARY_SCHEMA = "4"
INDEX_TABLES = ("library_vocab", "library_fts", "library_passages", "library_runs",
                "library_meta")  # library_vocab: an older Chord's, dropped with the rest

# Every table and index, in the order they are made (one statement each).
STATEMENTS: tuple[str, ...] = (
    # -- the full-text index (index.py) -------------------------------------------------
    """CREATE TABLE IF NOT EXISTS library_passages (
    id INTEGER PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL, task TEXT NOT NULL,
    video_path TEXT NOT NULL, folder TEXT NOT NULL, name TEXT NOT NULL, t0 REAL NOT NULL,
    t1 REAL NOT NULL, made_at REAL NOT NULL, day TEXT NOT NULL, model TEXT NOT NULL DEFAULT '',
    verdict TEXT NOT NULL DEFAULT '', found INTEGER NOT NULL DEFAULT 1)""",
    "CREATE INDEX IF NOT EXISTS library_passages_source ON library_passages (source)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS library_fts USING fts5 (
    text, place, tags, tokenize = 'unicode61 remove_diacritics 2')""",
    "CREATE TABLE IF NOT EXISTS library_runs (source TEXT PRIMARY KEY, indexed_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS library_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # the watermark's seek over the store's results (the store's own schema is untouched)
    "CREATE INDEX IF NOT EXISTS library_results_by_time ON results (created_at, job_id)",
    # -- cases (cases.py) ---------------------------------------------------------------
    """CREATE TABLE IF NOT EXISTS library_cases (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS library_case_moments (
    id INTEGER PRIMARY KEY, case_id INTEGER NOT NULL, path TEXT NOT NULL,
    start_s REAL NOT NULL, end_s REAL NOT NULL, label TEXT NOT NULL, origin TEXT NOT NULL,
    ref TEXT NOT NULL DEFAULT '', job_id TEXT NOT NULL DEFAULT '', score REAL,
    added_at REAL NOT NULL, UNIQUE (case_id, path, start_s, end_s, label))""",
    # -- watch folders, standing checks, alerts and their hooks (watch_table.py) ---------
    """CREATE TABLE IF NOT EXISTS library_watch_files (
    watch TEXT NOT NULL, key TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, state TEXT NOT NULL, job_id TEXT, error TEXT,
    owner TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (watch, key))""",
    "CREATE INDEX IF NOT EXISTS library_watch_files_state ON library_watch_files (watch, state)",
    """CREATE TABLE IF NOT EXISTS library_watch_seen (
    watch TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    key TEXT NOT NULL, PRIMARY KEY (watch, path))""",
    """CREATE TABLE IF NOT EXISTS library_alert_checks (
    watch TEXT NOT NULL, clip_key TEXT NOT NULL, statement TEXT NOT NULL, path TEXT NOT NULL,
    job_id TEXT, state TEXT NOT NULL, PRIMARY KEY (watch, clip_key, statement))""",
    """CREATE TABLE IF NOT EXISTS library_alerts (
    id INTEGER PRIMARY KEY, watch TEXT NOT NULL, clip_key TEXT NOT NULL,
    statement TEXT NOT NULL, path TEXT NOT NULL, start_s REAL NOT NULL, end_s REAL NOT NULL,
    probability REAL NOT NULL, evidence_json TEXT NOT NULL, job_id TEXT NOT NULL,
    created_at REAL NOT NULL, hook TEXT NOT NULL DEFAULT '',
    UNIQUE (watch, clip_key, statement, start_s))""",
    """CREATE TABLE IF NOT EXISTS library_hook_runs (
    id INTEGER PRIMARY KEY, alert_id INTEGER NOT NULL, watch TEXT NOT NULL,
    command TEXT NOT NULL, started_at REAL NOT NULL, duration_s REAL NOT NULL,
    exit_code INTEGER, outcome TEXT NOT NULL, output TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS library_hook_runs_alert ON library_hook_runs (alert_id)",
    # -- watches saved in the app (watch_saved.py) ---------------------------------------
    """CREATE TABLE IF NOT EXISTS library_watch_saved (
    id INTEGER PRIMARY KEY, folder TEXT NOT NULL, task TEXT NOT NULL, query TEXT NOT NULL,
    statements_json TEXT NOT NULL, threshold REAL NOT NULL, created_at REAL NOT NULL,
    UNIQUE (folder, task, query))""",
    # -- review marks (review.py) --------------------------------------------------------
    """CREATE TABLE IF NOT EXISTS library_review (item TEXT PRIMARY KEY,
    reviewed_at REAL NOT NULL, reviewed_by TEXT NOT NULL DEFAULT '')""",
    # -- live streams (streams/table.py) -------------------------------------------------
    """CREATE TABLE IF NOT EXISTS live_streams (
    id TEXT PRIMARY KEY, shown TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
    last_error TEXT NOT NULL DEFAULT '', settings_json TEXT NOT NULL DEFAULT '{}',
    status_json TEXT NOT NULL DEFAULT '{}', started_at REAL NOT NULL, stopped_at REAL)""",
    """CREATE TABLE IF NOT EXISTS live_chunks (
    stream_id TEXT NOT NULL, seq INTEGER NOT NULL, path TEXT NOT NULL,
    start_wall REAL NOT NULL, duration_s REAL NOT NULL, bytes INTEGER NOT NULL,
    cut TEXT NOT NULL DEFAULT '', jobs_json TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'recorded', alerts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream_id, start_wall, seq))""",
)

# Columns added since a table's first release, in order: (table, column, declaration). An
# added column is one older code never reads, so it needs no version of its own.
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("library_alert_checks", "owner", "TEXT NOT NULL DEFAULT ''"),  # the claiming lease
    ("library_alert_checks", "error", "TEXT"),  # why a check could not run
)


def migrate(conn: sqlite3.Connection) -> None:
    """Make every library table, index and added column the file lacks (inside the caller's
    write transaction: ``LibraryIndex`` opens the file with it). Idempotent."""
    _index_version(conn)
    for statement in STATEMENTS:
        conn.execute(statement)
    for table, column, decl in ADDED_COLUMNS:
        have = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    # FTS5's ranking: bm25 with the text weighted over the place (file name and folder)
    conn.execute("INSERT INTO library_fts (library_fts, rank) "
                 "VALUES ('rank', 'bm25(1.0, 0.4, 0.0)')")
    conn.execute("INSERT OR REPLACE INTO library_meta VALUES ('schema', ?)", (LIBRARY_SCHEMA,))


def _index_version(conn: sqlite3.Connection) -> None:
    """Drop the index's tables when an older (or newer) Chord made them differently."""
    meta = conn.execute("SELECT name FROM sqlite_master WHERE name = 'library_meta'"
                        ).fetchone()
    if not meta:
        return
    old = conn.execute("SELECT value FROM library_meta WHERE key = 'schema'").fetchone()
    if old is None or old[0] != LIBRARY_SCHEMA:
        for table in INDEX_TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


def ensure(index: LibraryIndex) -> None:
    """Apply ``migrate`` to an open index's file again, in a transaction of its own (the
    index applied it when it opened; this is for a caller that needs no more than that)."""
    with index.write() as conn:
        migrate(conn)


def tables() -> set[str]:
    """The names of the tables made here (for the checks that no other module makes one)."""
    names = set()
    for statement in STATEMENTS:
        words = statement.split()
        if words[1] in ("TABLE", "VIRTUAL"):
            names.add(words[words.index("EXISTS") + 1])
    return names


__all__ = ["ADDED_COLUMNS", "INDEX_TABLES", "LIBRARY_SCHEMA", "STATEMENTS", "ensure",
           "migrate", "tables"]
