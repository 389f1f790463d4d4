"""What one owner of the library's tables costs and saves (issue 38, library/schema.py).

Before, each module made its tables at first use of every call: ``alert_rows``,
``newest_alert_id``, ``review.items``, ``cases.cases``… each began with a write transaction
(``BEGIN IMMEDIATE`` and the module's ``CREATE … IF NOT EXISTS`` statements). Now the tables
are made once, when a ``LibraryIndex`` opens the file, and those calls only read. Same run,
same file (a store with ``--alerts`` alerts and ``--cases`` cases), medians over ``--calls``:

* a read through the modules alone, and the same read after what its module's
  ``create_tables`` did first before (a write transaction of that module's statements and
  column checks, taken from schema.py's list);
* the schema step of opening the file: every library table's statements (now) against the
  index's alone (what ``LibraryIndex`` ran at open before), on the made file.

    python benchmarks/library_tables.py [--calls 2000] [--alerts 200] [--cases 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _median_us(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e6, 1)


def _made_first(index: Any, tables: tuple[str, ...]) -> None:
    """What a call did first before schema.py: its module's ``create_tables`` — a write
    transaction of that module's CREATE … IF NOT EXISTS statements and column checks."""
    from chord_core.library import schema

    with index.write() as conn:
        for statement in schema.STATEMENTS:
            if any(f" {t} " in statement or f" {t}\n" in statement or f" {t} (" in statement
                   for t in tables):
                conn.execute(statement)
        for table, _, _ in schema.ADDED_COLUMNS:
            if table in tables:
                conn.execute(f"PRAGMA table_info({table})").fetchall()


def main() -> int:
    from chord_core.library import alerts, cases, schema
    from chord_core.library.index import LibraryIndex

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--alerts", type=int, default=200)
    ap.add_argument("--cases", type=int, default=20)
    args = ap.parse_args()
    db = Path(tempfile.mkdtemp(prefix="chord-library-tables-")) / "chord.sqlite3"
    out: dict[str, Any] = {"calls": args.calls, "alerts": args.alerts, "cases": args.cases}
    t0 = time.perf_counter()
    index = LibraryIndex(db)
    out["open_new_file_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    for n in range(args.alerts):
        alerts.store_alert(index, "w", {"clip_key": f"k{n}", "statement": "s",
                                        "path": f"/media/c{n}.mp4", "job_id": f"j{n}"},
                           {"start_s": 1.0, "end_s": 2.0, "probability": 0.9, "evidence": []})
    for n in range(args.cases):
        cases.add_moment(index, f"case {n}", path="/media/c.mp4", start_s=1.0, end_s=2.0,
                         label="m", origin="search")
    watch = ("library_watch_files", "library_watch_seen", "library_alert_checks",
             "library_alerts", "library_hook_runs")
    reads: dict[str, tuple[Callable[[], Any], tuple[str, ...]]] = {
        "newest_alert_id": (lambda: alerts.newest_alert_id(index), watch),
        "list_alerts_100": (lambda: alerts.list_alerts(index, limit=100), watch),
        "cases_list": (lambda: cases.cases(index), ("library_cases", "library_case_moments")),
    }
    for name, (read, tables) in reads.items():
        alone = _median_us(read, args.calls)

        def before(read: Callable[[], Any] = read, tables: tuple[str, ...] = tables) -> None:
            _made_first(index, tables)
            read()

        with_ddl = _median_us(before, args.calls)
        out[name] = {"read_us": alone, "tables_made_first_us": with_ddl,
                     "ratio": round(with_ddl / alone, 2)}
    index.close()
    t0 = time.perf_counter()
    LibraryIndex(db).close()
    out["open_made_file_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    index = LibraryIndex(db)
    index_only = [s for s in schema.STATEMENTS  # the index's statements: index.py's before
                  if any(t in s for t in ("library_passages", "library_fts", "library_runs",
                                          "library_meta", "library_results_by_time"))]
    assert len(index_only) == 6, index_only

    def all_tables() -> None:
        with index.write() as conn:
            schema.migrate(conn)

    def index_tables() -> None:
        with index.write() as conn:
            for statement in index_only:
                conn.execute(statement)
            conn.execute("INSERT INTO library_fts (library_fts, rank) "
                         "VALUES ('rank', 'bm25(1.0, 0.4, 0.0)')")
            conn.execute("INSERT OR REPLACE INTO library_meta VALUES ('schema', ?)",
                         (schema.LIBRARY_SCHEMA,))

    calls = max(1, args.calls // 4)
    every, only = _median_us(all_tables, calls), _median_us(index_tables, calls)
    out["schema_at_open"] = {"all_tables_us": every, "index_tables_us": only,
                             "ratio": round(every / only, 2)}
    index.close()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
