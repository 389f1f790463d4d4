"""Keeping the SQLite store file healthy: atomic creation, damage detection, moving a damaged
file aside, and ending a transaction that a full disk broke.

A 0-byte file at the store's path used to be opened as a valid, empty database — every result
vanished without a word. Stores are therefore only ever *created* under a temporary name and
linked into place, so an empty file at the path always means damage (a truncation, a copy cut
short), and is moved aside like a file SQLite calls "not a database" or "malformed".
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)


def create_atomically(path: Path, build: Callable[[Path], None]) -> None:
    """``build(tmp)`` makes a complete store at a temporary path, which is then hard-linked to
    ``path``: a reader never sees a half-made file, and when two processes create it at once
    the first one wins and the other uses it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.new")
    try:
        build(tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)


def move_aside(path: Path, reason: str) -> str:
    """Rename a damaged store (and its WAL) to ``<name>.corrupt-<time>``; returns the warning
    for the user (also logged)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.replace(path, aside)
    wal = Path(f"{path}-wal")
    if wal.exists():
        os.replace(wal, Path(f"{aside}-wal"))
    Path(f"{path}-shm").unlink(missing_ok=True)
    message = (f"the job store {path} could not be used ({reason}); it was moved to {aside} "
               f"and a new, empty store started: earlier history and results are in that "
               f"file, not in the app")
    log.warning("%s", message)
    return message


def is_damage(exc: sqlite3.DatabaseError) -> bool:
    """Whether an error means the file is not a (healthy) SQLite database — rather than a
    locked, read-only or full one, which moving it aside would not cure."""
    name = getattr(exc, "sqlite_errorname", "")
    text = str(exc).lower()
    return name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or any(
        w in text for w in ("not a database", "malformed", "integrity check failed"))


def rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction; SQLite may have rolled it back already (disk full)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.warning("rollback failed: %s", exc)
