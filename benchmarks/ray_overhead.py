"""What Ray costs on one machine: the same batch through local worker processes and through
Ray actors, with the same number of CPU workers and the tiny test model (issue 14).

Starts its own one-node Ray cluster (``ray start --head --block``, stopped at the end), makes
``--clips`` short synthetic clips, and for each executor: starts the workers, waits until
they are ready (not timed), then times submitting every clip until the last result. Prints
JSON: seconds, clips/min and the Ray/local ratio of the same run.

    python benchmarks/ray_overhead.py [--clips 24] [--workers 2] [--task ground] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from chord_core.analysis.request import AnalysisRequest  # noqa: E402
from chord_core.config import ModelConfig  # noqa: E402
from chord_core.runtime.cluster import start_manager  # noqa: E402
from chord_core.runtime.jobs import JobSpec  # noqa: E402
from chord_core.runtime.parallel_config import load_parallel_config  # noqa: E402
from chord_core.testing.videos import make_video  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_batch(executor: str, clips: list[Path], args: argparse.Namespace,
              address: str | None) -> dict:
    parallel = load_parallel_config(None, overrides={"cpu_workers": args.workers})
    cfg = ModelConfig(model="test", device="cpu")
    t0 = time.perf_counter()
    manager, _ = start_manager(cfg, parallel, executor=executor, ray_address=address)
    try:
        manager.wait_ready(600)
        ready_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        ids = [manager.submit(JobSpec(AnalysisRequest(str(c), args.task, "the square")))
               for c in clips]
        states = [manager.wait(i, 900).state.value for i in ids]
        wall = time.perf_counter() - t1
    finally:
        manager.shutdown(timeout=30)
    return {"executor": executor, "workers_ready_s": round(ready_s, 1),
            "batch_s": round(wall, 2), "clips_per_min": round(60 * len(clips) / wall, 1),
            "done": states.count("done"), "clips": len(clips)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=24)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--task", default="ground", choices=("ground", "describe"))
    ap.add_argument("--repeats", type=int, default=2,
                    help="local and Ray runs alternate this many times (load drifts)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    tmp = Path(tempfile.mkdtemp(prefix="chord-ray-bench-"))
    os.environ.setdefault("CHORD_CACHE_DIR", str(tmp / "cache"))
    clips = [make_video(tmp / f"c{i}.mp4", duration_s=1.0, fps=4.0, size_wh=(96, 64),
                        seed=i).path for i in range(args.clips)]
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    head = subprocess.Popen([str(ray_bin), "start", "--head", "--block", "--port", str(port),
                             "--num-cpus", str(args.workers), "--num-gpus", "0",
                             "--include-dashboard", "false", "--disable-usage-stats",
                             "--temp-dir", f"/tmp/chord-ray-bench-{os.getpid()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            start_new_session=True)
    try:
        time.sleep(8)  # the head's GCS and raylet come up
        runs = []
        for _ in range(args.repeats):
            local = run_batch("local", clips, args, None)
            ray_run = run_batch("ray", clips, args, f"127.0.0.1:{port}")
            runs.append({"local": local, "ray": ray_run,
                         "ray_over_local_time": round(ray_run["batch_s"] / local["batch_s"], 3)})
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(60)
    ratios = sorted(r["ray_over_local_time"] for r in runs)
    print(json.dumps({"runs": runs, "ratio_median": ratios[len(ratios) // 2],
                      "cpu_count": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
