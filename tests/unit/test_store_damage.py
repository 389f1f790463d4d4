"""A damaged or full job store: moved aside with a warning, never silently emptied; a full
disk is a clear ``StoreError``, and the store works again once there is room."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Callable

import pytest

from chord_core.errors import ChordError, StoreError
from chord_core.runtime.store import Store


def _with_jobs(path: Path, n: int = 40) -> None:
    """A real store with ``n`` jobs (several pages of data)."""
    with Store(path) as s:
        for i in range(n):
            s.add_job(f"j{i}", video_path=f"/clips/{i}.mp4", task="describe",
                      spec={"padding": "x" * 400})


def _zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not sqlite\n" * 300)


def _damaged_pages(path: Path) -> None:
    """A valid header and schema page, then pages overwritten with garbage."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) > 3 * page
    data[page:3 * page] = b"\xa5" * (2 * page)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_zero_bytes, _garbage, _damaged_pages],
                         ids=["zero-bytes", "garbage", "damaged-pages"])
def test_damaged_store_is_moved_aside_with_a_warning(tmp_path: Path, damage: Callable,
                                                     caplog) -> None:
    path = tmp_path / "chord.sqlite3"
    _with_jobs(path)
    damage(path)
    before = path.read_bytes()
    with Store(path) as s:
        assert s.count_jobs() == 0  # a fresh store …
        s.add_job("new", video_path="/clips/new.mp4", task="describe")
        assert s.get_job("new")["state"] == "queued"  # … that works
        aside = sorted(tmp_path.glob("chord.sqlite3.corrupt-*"))
        assert [p.name for p in aside if not p.name.endswith("-wal")] == [aside[0].name]
        assert aside[0].read_bytes() == before  # the old file is kept, byte for byte
        assert len(s.notices) == 1 and str(aside[0]) in s.notices[0]
        assert "new, empty store" in s.notices[0]
    assert str(aside[0]) in caplog.text
    with Store(path) as again:  # the fresh store is healthy: no second move, no notice
        assert again.notices == [] and again.count_jobs() == 1
    assert len([p for p in tmp_path.glob("chord.sqlite3.corrupt-*")
                if not p.name.endswith("-wal")]) == 1


def test_healthy_store_is_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "chord.sqlite3"
    _with_jobs(path, 3)
    with Store(path) as s:
        assert s.count_jobs() == 3 and s.notices == []
    assert not list(tmp_path.glob("*.corrupt-*"))
    assert not list(tmp_path.glob(".chord.sqlite3.*"))  # no temporary file left behind


def test_unopenable_store_is_not_moved(tmp_path: Path) -> None:
    """A path that cannot hold a store (its folder is a file) is an error, not 'damage'."""
    parent = tmp_path / "not-a-folder"
    parent.write_text("x")
    with pytest.raises(ChordError, match="cannot open the job store") as info:
        Store(parent / "chord.sqlite3")
    assert "CHORD_DATA_DIR" in info.value.hint
    assert parent.read_text() == "x"


def test_full_disk_is_a_store_error_and_recovers(tmp_path: Path) -> None:
    """SQLite's own page cap makes the database 'full' exactly as a full disk does
    (SQLITE_FULL): the fake sits at the boundary, the store's code is real."""
    s = Store(tmp_path / "chord.sqlite3")
    s.add_job("a", video_path="/clips/a.mp4", task="describe")
    conn = s._connection()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError) as info:
        for i in range(50):
            s.add_job(f"b{i}", video_path="/clips/b.mp4", task="describe",
                      spec={"padding": "y" * 2000})
    assert "full" in info.value.message and "free space" in info.value.hint
    assert info.value.exit_code == 2
    assert s.get_job("a")["state"] == "queued"  # reads still work; nothing half-written
    assert not conn.in_transaction
    conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    s.add_job("c", video_path="/clips/c.mp4", task="describe")
    assert s.get_job("c") is not None
    s.close()
    assert sqlite3.connect(tmp_path / "chord.sqlite3").execute(
        "PRAGMA quick_check").fetchone()[0] == "ok"
