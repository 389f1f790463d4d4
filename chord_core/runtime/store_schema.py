"""The job store's tables (SQLite), and creating or checking them on open.

Columns added since a schema version was cut (``ADDED_COLUMNS``) are added to an older store
on open: an added column never changes what older code reads, so it needs no new version.
``owners`` holds one lease per process that runs jobs (``leases.py``); ``jobs.owner`` names
the lease whose process runs (or last ran) the job.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from chord_core.errors import ChordError

SCHEMA_VERSION = 1
_DDL = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    batch_id TEXT PRIMARY KEY, created_at REAL NOT NULL, out_dir TEXT NOT NULL DEFAULT '',
    summary_json TEXT);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, batch_id TEXT, key TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL, video_path TEXT NOT NULL DEFAULT '', video_name TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '', query TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
    spec_json TEXT NOT NULL DEFAULT '{}', submitted_at REAL NOT NULL, started_at REAL,
    finished_at REAL, worker TEXT, attempts INTEGER NOT NULL DEFAULT 0, error_json TEXT,
    progress_json TEXT);
CREATE INDEX IF NOT EXISTS jobs_submitted ON jobs (submitted_at);
CREATE INDEX IF NOT EXISTS jobs_key_state ON jobs (key, state);
CREATE INDEX IF NOT EXISTS jobs_batch ON jobs (batch_id);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS results (
    job_id TEXT PRIMARY KEY REFERENCES jobs (job_id) ON DELETE CASCADE,
    result_json TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS owners (
    owner_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL,
    proc_start TEXT NOT NULL DEFAULT '', label TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL, heartbeat_at REAL NOT NULL, expires_at REAL NOT NULL);
"""
# (table, column, declaration) added after schema 1, on every open (``ALTER TABLE`` where a
# store lacks them): ``owner`` is the lease of the process that runs (or last ran) the job;
# ``parent`` is the parent job (a long-video run) of a chunk job; ``summary_json`` is a
# parent's summary (its plan, progress and final document).
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "owner", "TEXT"),
    ("jobs", "parent", "TEXT"),
    ("jobs", "summary_json", "TEXT"),
)


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables (a new store) or check the version (an existing one), atomically."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
        _add_columns(conn)
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        if row[0] is None:
            conn.execute("INSERT INTO schema_version (version) VALUES (?)",
                         (SCHEMA_VERSION,))
        elif row[0] > SCHEMA_VERSION:
            raise ChordError(
                f"{path} was written by a newer Chord (store schema {row[0]}, "
                f"this version reads {SCHEMA_VERSION})",
                hint="upgrade Chord, or set CHORD_DATA_DIR to another folder")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _add_columns(conn: sqlite3.Connection) -> None:
    """Add the ``ADDED_COLUMNS`` a store made by an older Chord lacks (inside migrate's
    transaction), and their indexes."""
    for table, column, decl in ADDED_COLUMNS:
        have = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    conn.execute("CREATE INDEX IF NOT EXISTS jobs_owner_state ON jobs (owner, state)")
    conn.execute("CREATE INDEX IF NOT EXISTS jobs_parent ON jobs (parent)")
