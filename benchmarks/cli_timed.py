"""A command as a user runs it, timed from outside with Chord's own GPU sampler (issue 34's
"user-defaults" row: ``python -m chord_core chapters hour.mp4`` from a cold start).

    python3 benchmarks/cli_timed.py --out user.json -- \
        python3 -m chord_core chapters /tmp/real_hour.mp4 --model /tmp/chord-rand-7b --json ch.json

runs the command in a child process (its stderr passed through and kept), samples every
visible GPU with ``chord_core.gpus.sampler`` every 0.5 s meanwhile, and prints one JSON line:
the exit code, the wall from the child's start to its exit, GPU busy (mean and median of the
samples inside that wall, the peak memory), the ``reader: …`` line the CLI printed, the
last progress lines (the stages' times), and with ``--store`` the first model calls' times
from the job store the command wrote. "Cold" is the caller's doing: give the child fresh
``CHORD_CACHE_DIR`` (compile caches) and ``CHORD_DATA_DIR`` (no stored run to read back).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_timed(argv: list[str]) -> dict:
    """Run ``argv``, its stderr echoed; the figures above."""
    from long_video import _gpu_util, _util_summary

    sampler, _ = _gpu_util()
    tail: deque[str] = deque(maxlen=12)
    reader = ""
    w0, t0 = time.time(), time.perf_counter()
    with subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, bufsize=1) as child:
        assert child.stderr is not None
        for line in child.stderr:
            sys.stderr.write(line)
            tail.append(line.rstrip())
            if line.startswith("reader:"):
                reader = line.strip()
        rc = child.wait()
    wall, w1 = time.perf_counter() - t0, time.time()
    out = {"command": " ".join(argv), "rc": rc, "wall_s": round(wall, 1),
           "reader_line": reader or "(none printed)", **_util_summary(sampler, w0, w1),
           "stderr_tail": list(tail)}
    if sampler is not None and getattr(sampler, "available", False):
        sampler.stop()
    return out


def store_jobs(db: Path, since: float, first: int = 12) -> list[dict]:
    """The run's model calls from the store the command wrote (``CHORD_DATA_DIR``), in the
    order they started: when each was queued, started and finished (seconds after the
    command started) and its result's stage times, the first ``first`` of them (where the
    first chunk's time goes on a cold start)."""
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    rows = conn.execute(
        "SELECT j.job_id, j.worker, j.submitted_at, j.started_at, j.finished_at, "
        "r.result_json FROM jobs j LEFT JOIN results r USING (job_id) "
        "WHERE j.parent IS NOT NULL ORDER BY j.started_at LIMIT ?", (first,)).fetchall()
    conn.close()
    out = []
    for r in rows:
        timing = json.loads(r["result_json"]).get("timing", {}) if r["result_json"] else {}
        out.append({"job": r["job_id"][-6:], "worker": r["worker"],
                    **{k: round(r[k] - since, 2) for k in ("submitted_at", "started_at",
                                                            "finished_at") if r[k]},
                    "timing": {k: round(v, 2) for k, v in timing.items() if v}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--store", default=None,
                    help="the command's chord.sqlite3: add its first model calls' times")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = ap.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        ap.error("give the command after --")
    w0 = time.time()
    out = run_timed(argv)
    if args.store and Path(args.store).exists():
        out["first_jobs"] = store_jobs(Path(args.store), w0)
    text = json.dumps(out)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0 if out["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
