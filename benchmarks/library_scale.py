"""The library at a year of a small site's footage: 100,000 clip results, 1,000,000 passages.

For each size (default 10k, 100k, 1M passages) the job store is filled to that size through
the real paths: ``Store.add_job`` + ``Store.save_result`` (clip results of the synthetic
kind below), then ``LibraryIndex.sync()`` indexes them (the watermark path a search runs).
Each result is a grounding result on its own clip: a target and 10 segments whose labels
are generated sentences (Zipf-skewed words of surveillance, inspection and lecture footage,
``chord_core/testing/library_docs.py``), so 10 passages per result and 100,000 results at
1M passages; clips spread over 200 folders and 365 days.

Printed per size: store ingest (results/s through save_result), index ingest (passages/s
through sync), the file's size and the index's share of it, and search latency p50/p99/max
(wall, and CPU time of the searching thread: the machine's load shows in wall time only)
over ``--queries`` searches (1–3 words drawn like the text, so common words that match
tens of thousands of passages are in it; a third with a folder filter, a third with a date
range), each a full ``search()`` call as the service runs it (sync check included).

    python benchmarks/library_scale.py                          # 10k, 100k, 1M
    python benchmarks/library_scale.py --bulk                   # rows written in bulk
    python benchmarks/library_scale.py --sizes 2000 --queries 50   # smoke (the test)
    python benchmarks/library_scale.py --store DIR/chord.sqlite3 --seeds 1,2,3,4
                                  # searches only, on a store built before (old against new)

Writes ``$OUT/library_scale.json`` (OUT defaults to the current folder).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chord_core.library.index import LibraryIndex  # noqa: E402
from chord_core.library.search import Filters, search  # noqa: E402
from chord_core.runtime.store import Store  # noqa: E402
from chord_core.testing.library_docs import WORDS, result_doc, sentence  # noqa: E402

PASSAGES_PER_RESULT = 10
FOLDERS = 200
DAY_S = 86400.0
YEAR_START = 1767225600.0  # 2026-01-01 UTC


def _result(i: int, rng: random.Random) -> dict:
    segments = [(s * 6.0, s * 6.0 + 4.0) for s in range(PASSAGES_PER_RESULT)]
    doc = result_doc("ground", f"/footage/site{i % FOLDERS:03d}/cam{i % 7}/clip{i:06d}.mp4",
                     query=sentence(rng, 3).rstrip("."), duration_s=60.0, segments=segments)
    for seg in doc["segments"]:
        seg["label"] = sentence(rng, 8)
    return doc


def fill(store: Store, start: int, stop: int, rng: random.Random) -> float:
    """Results ``start..stop-1`` saved through the store; returns seconds taken."""
    t0 = time.perf_counter()
    for i in range(start, stop):
        job = f"job-{i:08d}"
        doc = _result(i, rng)
        store.add_job(job, video_path=doc["video"]["path"], task="ground", query=doc["query"],
                      model="test", submitted_at=YEAR_START + (i * 7919 % 365) * DAY_S)
        store.save_result(job, doc)
    return time.perf_counter() - t0


def fill_bulk(path: Path, start: int, stop: int, rng: random.Random) -> float:
    """The same job and result rows as ``fill``, written 2,000 to a transaction with plain
    SQL (``--bulk``: the store's per-result commit is not what is measured then)."""
    import sqlite3

    t0 = time.perf_counter()
    with sqlite3.connect(path, isolation_level=None) as conn:
        for lo in range(start, stop, 2000):
            conn.execute("BEGIN IMMEDIATE")
            for i in range(lo, min(stop, lo + 2000)):
                doc, job = _result(i, rng), f"job-{i:08d}"
                at = YEAR_START + (i * 7919 % 365) * DAY_S
                conn.execute("INSERT INTO jobs (job_id, state, video_path, video_name, task, "
                             "query, model, submitted_at, finished_at) VALUES (?, 'done', ?, "
                             "?, 'ground', ?, 'test', ?, ?)", (job, doc["video"]["path"],
                                                              Path(doc["video"]["path"]).name,
                                                              doc["query"], at, at))
                conn.execute("INSERT INTO results VALUES (?, ?, ?)",
                             (job, json.dumps(doc), time.time()))
            conn.execute("COMMIT")
    return time.perf_counter() - t0


def _queries(n: int, rng: random.Random) -> list[tuple[str, Filters]]:
    out = []
    for k in range(n):
        words = sentence(rng, rng.randint(1, 3)).rstrip(".").lower()
        if k % 3 == 1:
            filters = Filters(folder=f"/footage/site{rng.randrange(FOLDERS):03d}")
        elif k % 3 == 2:
            filters = Filters(date_from="2026-12-01", date_to="2026-12-31")
        else:
            filters = Filters()
        out.append((words, filters))
    return out


def measure(index: LibraryIndex, n: int, rng: random.Random) -> dict:
    """Wall and CPU milliseconds per search (CPU: this thread's own time, so a machine
    shared with other work shows in wall time only)."""
    times, cpu, hits = [], [], []
    for q, filters in _queries(n, rng):
        t0, c0 = time.perf_counter(), time.thread_time()
        doc = search(index, q, filters=filters, limit=20)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
        hits.append(len(doc["hits"]))
    times.sort()
    cpu.sort()
    p99 = min(len(times) - 1, int(0.99 * len(times)))
    return {"queries": n, "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(times[p99], 2), "max_ms": round(times[-1], 2),
            "cpu_p50_ms": round(statistics.median(cpu), 2), "cpu_p99_ms": round(cpu[p99], 2),
            "mean_hits": round(statistics.mean(hits), 1)}


def index_bytes(path: Path) -> int | None:
    """Bytes of the library's tables and indexes (SQLite's dbstat), when available."""
    import sqlite3

    try:
        with sqlite3.connect(path) as conn:
            row = conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'library%'"
                               ).fetchone()
        return int(row[0] or 0)
    except sqlite3.OperationalError:
        return None


def run(sizes: list[int], queries: int, folder: Path, bulk: bool = False) -> list[dict]:
    rng = random.Random(0)
    path = folder / "chord.sqlite3"
    rows, done = [], 0
    with Store(path) as store, LibraryIndex(path) as index:
        for size in sizes:
            results = size // PASSAGES_PER_RESULT
            store_s = fill_bulk(path, done, results, rng) if bulk else \
                fill(store, done, results, rng)
            t0 = time.perf_counter()
            added = index.sync()
            sync_s = time.perf_counter() - t0
            new = results - done
            done = results
            stats = index.stats()
            row = {"passages": stats["passages"], "results": results,
                   ("bulk_results_per_s" if bulk else "store_results_per_s"):
                       round(new / store_s, 1),
                   "index_passages_per_s": round(added / sync_s, 1),
                   "file_mb": round(path.stat().st_size / 2**20, 1),
                   "index_mb": round((index_bytes(path) or 0) / 2**20, 1),
                   **measure(index, queries, rng),
                   "load_avg_1m": round(os.getloadavg()[0], 1)}  # a shared machine says so
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="passage counts, ascending (default 10k,100k,1M)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dir", default=None, help="where the store is built (default: tmp)")
    parser.add_argument("--bulk", action="store_true",
                        help="write the result rows 2,000 to a transaction (faster to build; "
                             "the index sync and the searches are measured the same)")
    parser.add_argument("--store", default=None,
                        help="measure searches on this existing store (built and indexed "
                             "before): one row per seed of --seeds, no results added")
    parser.add_argument("--seeds", default="1", help="query mixes for --store (default 1)")
    args = parser.parse_args()
    if args.store:
        with LibraryIndex(args.store) as index:
            for seed in (int(s) for s in args.seeds.split(",")):
                row = {"seed": seed, "passages": index.totals()[0],
                       **measure(index, args.queries, random.Random(seed)),
                       "load_avg_1m": round(os.getloadavg()[0], 1)}
                print(json.dumps(row), flush=True)
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = run(sizes, args.queries, Path(tmp), args.bulk)
    out = Path(os.environ.get("OUT", ".")) / "library_scale.json"
    out.write_text(json.dumps({"words": len(WORDS), "sizes": rows}, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
