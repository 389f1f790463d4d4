"""A worker's start with its model imports begun on a thread (``model/preimport.py``) against
the same start with them all in the load step: alternated pairs of fresh processes, each
``workers.prepare_process`` then ``workers.serve`` until ``Ready`` (the test model unless
``--model``), printing every pair's start-up split and the medians.

"off" replaces ``preimport.start`` with a no-op in its process (nothing else differs), so the
pairs compare the thread alone. On a shared machine the load moves more than this changes:
run enough pairs, and read the pair-by-pair differences as well as the medians.

  python3 benchmarks/startup_imports.py --pairs 10          # CPU, the test model
  python3 benchmarks/startup_imports.py --pairs 5 --gpu 0 --model /ckpt/7b   # a GPU host
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("ready_s", "imports_s", "early_imports_s", "load_s", "load_imports_s",
        "load_weights_s", "load_processor_thread_s", "load_processor_s")

_WORKER = """
import json, queue, sys, time
t0 = time.perf_counter()
from chord_core.config import ModelConfig
from chord_core.model import preimport
if sys.argv[1] == "off":
    preimport.start = lambda model: None
from chord_core.runtime.messages import StopWorker
from chord_core.runtime.workers import WorkerSpec, prepare_process, serve
devices = tuple(int(d) for d in sys.argv[3].split(",") if d)
spec = WorkerSpec("w0", devices, ModelConfig(model=sys.argv[2]), warmup=False)
prepare_process(spec)
inbox, outbox, control = queue.Queue(), queue.Queue(), queue.Queue()
inbox.put(StopWorker()); control.put(StopWorker())
serve(spec, inbox, outbox, control, t0=t0)
ready = [m for m in list(outbox.queue) if type(m).__name__ == "Ready"][0]
assert ready.error is None, ready.error
print(json.dumps(ready.startup))
"""


def start_once(mode: str, model: str, gpu: str) -> dict[str, float]:
    """One fresh worker process's start-up split (``mode`` on or off)."""
    out = subprocess.run([sys.executable, "-c", _WORKER, mode, model, gpu], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"worker ({mode}) exited {out.returncode}: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--model", default="test")
    p.add_argument("--gpu", default="", help="CUDA ordinals of the worker (default: CPU)")
    args = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for _ in range(args.pairs):
        for mode in ("on", "off"):
            split = start_once(mode, args.model, args.gpu)
            runs[mode].append(split)
            print(mode, " ".join(f"{k}={split[k]:.2f}" for k in KEYS if k in split),
                  flush=True)
    diffs = [a["ready_s"] - b["ready_s"] for a, b in zip(runs["on"], runs["off"])]
    for mode, rows in runs.items():
        ready = [r["ready_s"] for r in rows]
        print(f"{mode}: ready_s median {statistics.median(ready):.2f} "
              f"(range {min(ready):.2f}-{max(ready):.2f})")
    print(f"on - off, pair by pair: {', '.join(f'{d:+.2f}' for d in diffs)} "
          f"(mean {statistics.mean(diffs):+.2f} s)")


if __name__ == "__main__":
    main()
