"""The library's tables have one owner (issue 38, "one door to the store"):
``chord_core/library/schema.py`` makes and migrates every one of them when a ``LibraryIndex``
opens the file, and no other module holds a CREATE, ALTER or DROP statement.

Checked here: the scan of every module's string constants (and that the scan catches what it
is for), that every library table a module queries is one the schema makes, that migrating
twice changes nothing, and that a file made by the code before schema.py (its statements
copied below as ``OLD_SCHEMA``) opens, gains what it lacks, keeps its rows, and is read and
written through the modules that own the rows.
"""

from __future__ import annotations

import ast
import json
import re
import sqlite3
import time
from pathlib import Path

import pytest
from app_sources import app_sources

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_MODULES = {"chord_core/library/schema.py",  # the library's tables
                  "chord_core/runtime/store_schema.py"}  # the job store's own
DDL = re.compile(r"\b(CREATE\s+(UNIQUE\s+|VIRTUAL\s+)?(TABLE|INDEX|TRIGGER|VIEW)|"
                 r"ALTER\s+TABLE|DROP\s+(TABLE|INDEX|TRIGGER|VIEW))\b", re.IGNORECASE)
USED = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+((?:library|live)_\w+)", re.IGNORECASE)


def _sources() -> list[Path]:
    return app_sources(leave_out=SCHEMA_MODULES)


def _strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of the module, f-strings' literal parts included (implicitly
    joined literals are one constant in the syntax tree)."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def _ddl_breaches(path: Path, root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{line} holds {m.group(0)!r}: the library's tables are "
            "made and migrated in chord_core/library/schema.py only"
            for line, text in _strings(path) for m in [DDL.search(text)] if m]


def test_only_the_schema_modules_make_or_change_tables():
    sources = _sources()
    assert len(sources) > 100  # the scan sees the packages (not an empty glob)
    breaches = [b for p in sources for b in _ddl_breaches(p, ROOT)]
    assert not breaches, "\n".join(breaches)


def test_the_scan_catches_each_kind_of_statement(tmp_path):
    """The scan fails on what it is for (else the test above proves nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text('A = """\nCREATE TABLE IF NOT EXISTS library_x (id INTEGER);\n"""\n'
                   'B = ("create index if not exists library_x_id "\n     "ON library_x (id)")\n'
                   'def f(conn, t, c):\n'
                   '    conn.execute(f"ALTER TABLE {t} ADD COLUMN {c} TEXT")\n'
                   '    conn.execute(f"DROP TABLE IF EXISTS {t}")\n'
                   'C = "CREATE VIRTUAL TABLE library_y USING fts5 (text)"\n'
                   'D = "SELECT * FROM library_x -- a query is fine"\n')
    found = _ddl_breaches(bad, tmp_path)
    lines = sorted(int(f.split(":")[1].split()[0]) for f in found)
    assert lines == [1, 4, 7, 8, 9], found  # every statement; the SELECT is not one


def test_every_library_table_a_module_queries_is_made_by_the_schema(tmp_path):
    from chord_core.library import schema
    from chord_core.library.index import LibraryIndex

    used = {m.group(1) for p in _sources() for _, text in _strings(p)
            for m in USED.finditer(text)}
    assert {"library_alerts", "library_review", "live_chunks"} <= used  # the scan reads
    fts_shadow = {"library_fts_data", "library_fts_content"}  # FTS5's own, under library_fts
    assert used - fts_shadow <= schema.tables(), used - fts_shadow - schema.tables()
    with LibraryIndex(tmp_path / "chord.sqlite3") as index:
        made = {r[0] for r in index.read("SELECT name FROM sqlite_master")}
    assert schema.tables() | fts_shadow <= made
    assert {"library_passages_source", "library_results_by_time", "library_hook_runs_alert",
            "library_watch_files_state"} <= made


def _dump(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return sorted(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql NOT NULL"))


def test_migrating_again_changes_nothing_and_keeps_the_index(tmp_path):
    from chord_core.library import schema
    from chord_core.library.index import LibraryIndex
    from chord_core.library.search import search
    from chord_core.runtime.store import Store
    from chord_core.testing.library_docs import result_doc, store_result

    path = tmp_path / "chord.sqlite3"
    with Store(path) as store:
        store_result(store, "j1", result_doc("describe", "/media/yard/a.mp4",
                                             text="a forklift crosses the yard"))
    with LibraryIndex(path) as index:
        assert index.sync() > 0
    first = _dump(path)
    with LibraryIndex(path) as index:
        schema.ensure(index)  # and once more in the same connection
        assert index.sync() == 0  # the watermark was kept: nothing indexed twice
        assert search(index, "forklift")["hits"][0]["source"] == "j1"
        columns = [r[1] for r in index.read("PRAGMA table_info(library_alert_checks)")]
    assert _dump(path) == first
    assert columns.count("owner") == 1 and columns.count("error") == 1


# The statements of the code before schema.py (9aec655: index.py, cases.py, watch_table.py,
# watch_saved.py, streams/table.py), library_alert_checks as first released (89c006d, before
# the owner and error columns). library_review and library_hook_runs are left out: a file
# from before them lacks them.
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS library_passages (
    id INTEGER PRIMARY KEY, source TEXT NOT NULL, kind TEXT NOT NULL, task TEXT NOT NULL,
    video_path TEXT NOT NULL, folder TEXT NOT NULL, name TEXT NOT NULL, t0 REAL NOT NULL,
    t1 REAL NOT NULL, made_at REAL NOT NULL, day TEXT NOT NULL, model TEXT NOT NULL DEFAULT '',
    verdict TEXT NOT NULL DEFAULT '', found INTEGER NOT NULL DEFAULT 1);
CREATE INDEX IF NOT EXISTS library_passages_source ON library_passages (source);
CREATE VIRTUAL TABLE IF NOT EXISTS library_fts USING fts5 (
    text, place, tags, tokenize = 'unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS library_runs (source TEXT PRIMARY KEY, indexed_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS library_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS library_results_by_time ON results (created_at, job_id);
CREATE TABLE IF NOT EXISTS library_cases (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS library_case_moments (
    id INTEGER PRIMARY KEY, case_id INTEGER NOT NULL, path TEXT NOT NULL,
    start_s REAL NOT NULL, end_s REAL NOT NULL, label TEXT NOT NULL, origin TEXT NOT NULL,
    ref TEXT NOT NULL DEFAULT '', job_id TEXT NOT NULL DEFAULT '', score REAL,
    added_at REAL NOT NULL, UNIQUE (case_id, path, start_s, end_s, label));
CREATE TABLE IF NOT EXISTS library_watch_files (
    watch TEXT NOT NULL, key TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, state TEXT NOT NULL, job_id TEXT, error TEXT,
    owner TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (watch, key));
CREATE INDEX IF NOT EXISTS library_watch_files_state ON library_watch_files (watch, state);
CREATE TABLE IF NOT EXISTS library_watch_seen (
    watch TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    key TEXT NOT NULL, PRIMARY KEY (watch, path));
CREATE TABLE IF NOT EXISTS library_alert_checks (
    watch TEXT NOT NULL, clip_key TEXT NOT NULL, statement TEXT NOT NULL, path TEXT NOT NULL,
    job_id TEXT, state TEXT NOT NULL, PRIMARY KEY (watch, clip_key, statement));
CREATE TABLE IF NOT EXISTS library_alerts (
    id INTEGER PRIMARY KEY, watch TEXT NOT NULL, clip_key TEXT NOT NULL,
    statement TEXT NOT NULL, path TEXT NOT NULL, start_s REAL NOT NULL, end_s REAL NOT NULL,
    probability REAL NOT NULL, evidence_json TEXT NOT NULL, job_id TEXT NOT NULL,
    created_at REAL NOT NULL, hook TEXT NOT NULL DEFAULT '',
    UNIQUE (watch, clip_key, statement, start_s));
CREATE TABLE IF NOT EXISTS library_watch_saved (
    id INTEGER PRIMARY KEY, folder TEXT NOT NULL, task TEXT NOT NULL, query TEXT NOT NULL,
    statements_json TEXT NOT NULL, threshold REAL NOT NULL, created_at REAL NOT NULL,
    UNIQUE (folder, task, query));
CREATE TABLE IF NOT EXISTS live_streams (
    id TEXT PRIMARY KEY, shown TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL,
    last_error TEXT NOT NULL DEFAULT '', settings_json TEXT NOT NULL DEFAULT '{}',
    status_json TEXT NOT NULL DEFAULT '{}', started_at REAL NOT NULL, stopped_at REAL);
CREATE TABLE IF NOT EXISTS live_chunks (
    stream_id TEXT NOT NULL, seq INTEGER NOT NULL, path TEXT NOT NULL,
    start_wall REAL NOT NULL, duration_s REAL NOT NULL, bytes INTEGER NOT NULL,
    cut TEXT NOT NULL DEFAULT '', jobs_json TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'recorded', alerts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (stream_id, start_wall, seq));
INSERT INTO library_fts (library_fts, rank) VALUES ('rank', 'bm25(1.0, 0.4, 0.0)');
INSERT OR REPLACE INTO library_meta VALUES ('schema', '4');
"""


def _old_file(path: Path, media: Path) -> None:
    """A store the old code wrote: one indexed result, a case, a watched clip with its
    check (no owner: the first release) and an alert, a saved watch, a stream's chunk."""
    from chord_core.library.passages import result_passages
    from chord_core.runtime.store import Store
    from chord_core.testing.library_docs import result_doc, store_result

    with Store(path) as store:
        store_result(store, "j-old", result_doc("describe", str(media / "gate.mp4"),
                                                text="a forklift parks at the gate"))
    now = time.time()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(OLD_SCHEMA)
    conn.execute("BEGIN")
    job = conn.execute("SELECT r.job_id, r.created_at, r.result_json, j.state, j.video_path, "
                       "j.task, j.finished_at, j.video_name FROM results r JOIN jobs j "
                       "ON j.job_id = r.job_id").fetchone()
    cols = ("job_id", "created_at", "result_json", "state", "video_path", "task",
            "finished_at", "video_name")
    row = dict(zip(cols, job))
    for p in result_passages(row, json.loads(row["result_json"]), row["created_at"]):
        cur = conn.execute(
            "INSERT INTO library_passages (source, kind, task, video_path, folder, name, t0, "
            "t1, made_at, day, model, verdict, found) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (p.source, p.kind, p.task, p.video_path, p.folder, p.name, p.t0, p.t1,
             p.made_at, p.day, p.model, p.verdict, int(p.found)))
        conn.execute("INSERT INTO library_fts (rowid, text, place, tags) VALUES (?, ?, ?, ?)",
                     (cur.lastrowid, p.text, p.place, p.tags))
    conn.execute("INSERT INTO library_meta VALUES ('watermark', ?)",
                 (json.dumps([row["created_at"], row["job_id"]]),))
    conn.execute("INSERT INTO library_cases (name, created_at) VALUES ('yard', ?)", (now,))
    conn.execute("INSERT INTO library_case_moments (case_id, path, start_s, end_s, label, "
                 "origin, added_at) VALUES (1, ?, 1.0, 2.0, 'old moment', 'search', ?)",
                 (str(media / "gate.mp4"), now))
    conn.execute("INSERT INTO library_watch_files VALUES ('w-old', 'k1', ?, 10, 1, 'done', "
                 "'j-old', NULL, 'gone-owner', ?)", (str(media / "gate.mp4"), now))
    conn.execute("INSERT INTO library_alert_checks VALUES ('w-old', 'k1', 'a van parks', ?, "
                 "'j-check', 'submitted')", (str(media / "gate.mp4"),))
    conn.execute("INSERT INTO library_alerts (watch, clip_key, statement, path, start_s, "
                 "end_s, probability, evidence_json, job_id, created_at) VALUES ('w-old', "
                 "'k1', 'a van parks', ?, 1.0, 2.0, 0.9, '[]', 'j-check', ?)",
                 (str(media / "gate.mp4"), now))
    conn.execute("INSERT INTO library_watch_saved (folder, task, query, statements_json, "
                 "threshold, created_at) VALUES (?, 'describe', '', '[\"a van parks\"]', "
                 "0.8, ?)", (str(media), now))
    conn.execute("INSERT INTO live_streams (id, shown, kind, state, started_at) VALUES "
                 "('s1', 'rtsp://cam/…', 'rtsp', 'stopped', ?)", (now,))
    conn.execute("INSERT INTO live_chunks (stream_id, seq, path, start_wall, duration_s, "
                 "bytes) VALUES ('s1', 0, '/data/streams/s1/0.mp4', ?, 10.0, 100)", (now,))
    conn.execute("COMMIT")
    conn.close()


def test_a_file_made_by_the_old_code_opens_migrates_and_is_read_and_written(
        tmp_path, monkeypatch):
    from chord_core.library import alerts, cases, review, watch_saved
    from chord_core.library.index import LibraryIndex
    from chord_core.library.search import search
    from chord_core.library.watch_table import WatchTable
    from chord_core.streams.segments import Segment
    from chord_core.streams.table import StreamTable

    media, path = tmp_path / "media", tmp_path / "data" / "chord.sqlite3"
    media.mkdir()
    path.parent.mkdir()
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    _old_file(path, media)
    old_tables = {n for n, _ in _dump(path)}
    assert "library_review" not in old_tables and "library_hook_runs" not in old_tables

    with LibraryIndex(path) as index:
        # the index was kept (same version): found at once, nothing indexed again
        assert index.sync() == 0
        assert search(index, "forklift")["hits"][0]["source"] == "j-old"
        # the check of the first release gained its columns, and is taken over (no owner)
        table = WatchTable(index, "w-old", owner="me")
        [check] = table.take_over_checks()
        assert (check["statement"], check["owner"], check["error"]) == ("a van parks", "", None)
        table.set_check("k1", "a van parks", "error", error="the clip is gone")
        assert table.checks("error")[0]["owner"] == "me"
        assert table.rows("done")[0]["job_id"] == "j-old"
        # the old alert is listed, a new one stored; hook runs (a table it lacked) recorded
        assert [a["statement"] for a in alerts.list_alerts(index)] == ["a van parks"]
        new = alerts.store_alert(index, "w-old", {"clip_key": "k1", "statement": "a van parks",
                                                  "path": str(media / "gate.mp4"),
                                                  "job_id": "j-check"},
                                 {"start_s": 5.0, "end_s": 6.0, "probability": 0.95,
                                  "evidence": []})
        assert new is not None and alerts.newest_alert_id(index) == new
        from chord_core.library.watch_table import hook_runs, record_hook_run
        record_hook_run(index, {"alert_id": new, "watch": "w-old", "command": "true",
                                "started_at": time.time(), "duration_s": 0.1,
                                "exit_code": 0, "outcome": "ok", "output": ""})
        assert hook_runs(index, [new])[new]["outcome"] == "ok"
        # review marks (a table the old file lacked) over the old alert
        assert review.mark(index, ["a1"], by="tester") == 1
        doc = review.listing(index)
        assert (doc["count"], doc["unreviewed"]) == (2, 1)
        # the old case keeps its moment and takes another
        assert [m["label"] for m in cases.moments(index, "yard")] == ["old moment"]
        assert cases.add_moment(index, "yard", path=str(media / "gate.mp4"), start_s=3.0,
                                end_s=4.0, label="new moment", origin="review")
        assert [c["moments"] for c in cases.cases(index)] == [2]
        # the saved watch is read back, and removed
        [saved] = watch_saved.saved_watches(index)
        assert saved["statements"] == ["a van parks"]
        assert watch_saved.remove_watch(index, saved["id"])
        # the stream's rows read and written
        streams = StreamTable(index)
        assert streams.stream("s1")["state"] == "stopped"
        streams.chunk(Segment("s1", 1, "/data/streams/s1/1.mp4", time.time(), 10.0,
                              bytes=120), {"describe": "j-chunk"})
        assert [c["seq"] for c in streams.chunks("s1")] == [1, 0]
    migrated = _dump(path)
    assert {"library_review", "library_hook_runs", "library_hook_runs_alert"} <= {
        n for n, _ in migrated}
    with LibraryIndex(path) as index:  # and opening the migrated file again changes nothing
        pass
    assert _dump(path) == migrated


def test_an_index_of_another_version_is_made_again_and_the_rest_kept(tmp_path):
    from chord_core.library import cases, schema
    from chord_core.library.index import LibraryIndex

    media, path = tmp_path / "media", tmp_path / "chord.sqlite3"
    media.mkdir()
    _old_file(path, media)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE library_meta SET value = '3' WHERE key = 'schema'")
    with LibraryIndex(path) as index:
        assert index.read("SELECT COUNT(*) FROM library_passages")[0][0] == 0  # dropped
        assert index.read("SELECT value FROM library_meta WHERE key = 'schema'"
                          )[0][0] == schema.LIBRARY_SCHEMA
        assert index.sync() > 0  # the watermark went with it: the store is read again
        assert [m["label"] for m in cases.moments(index, "yard")] == ["old moment"]
        assert index.read("SELECT COUNT(*) FROM library_alerts")[0][0] == 1


@pytest.mark.parametrize("broken", ["library_alert_checks", "library_fts"])
def test_a_migration_that_fails_leaves_the_file_as_it_was(tmp_path, broken, monkeypatch):
    """One transaction: a statement that fails half way rolls back every change before it
    (here a view named like a table the schema makes: CREATE TABLE IF NOT EXISTS passes it,
    the column check or the FTS5 insert then fails), the error says what to do, and the
    index's connection is closed (it was left open: a file handle per failed start)."""
    from chord_core.errors import StoreError
    from chord_core.library import index as index_module
    from chord_core.library.index import LibraryIndex
    from chord_core.runtime.store_read import StoreView


    path = tmp_path / "chord.sqlite3"
    StoreView.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"CREATE VIEW {broken} AS SELECT 1 AS x")
    before = _dump(path)
    made: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        made.append(real_connect(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(index_module.sqlite3, "connect", connect)  # (the module: every caller)
    with pytest.raises(StoreError) as err:
        LibraryIndex(path)
    assert "could not be" in err.value.message and "--rebuild" in (err.value.hint or "")
    monkeypatch.undo()
    assert made  # the store's check and the index's own: none is left open
    for conn in made:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
    assert _dump(path) == before
