"""The first search of a store nobody indexed yet, in a running service (issue 40,
docs/reliability.md): how long the search takes to answer, and ``/health`` sampled every
0.1 s while the rest is indexed behind (library/catch_up.py), until the answer says the index
is complete.

The store is filled in bulk with ``benchmarks/library_scale.py``'s synthetic grounding
results (10 passages each), then a real ``python -m chord_core serve --model test
--cpu-workers 1`` is started on it (127.0.0.1, a key).

    python benchmarks/first_search.py [--results 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
KEY = "bench-first-search"


def _get(port: int, path: str, key: bool = True) -> tuple[float, dict]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {KEY}"} if key else {})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
    return time.perf_counter() - started, body


def main() -> int:
    from alert_streams import _free_port, _wait_ready
    from library_scale import fill_bulk

    from chord_core.runtime.store import Store

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=int, default=10000)
    args = ap.parse_args()
    data = Path(tempfile.mkdtemp(prefix="chord-first-search-"))
    (data / "media").mkdir()
    db = data / "chord.sqlite3"
    Store(db).close()
    fill_bulk(db, 0, args.results, random.Random(1))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHORD_")}
    proc = subprocess.Popen([sys.executable, "-m", "chord_core", "serve", "--model", "test",
                             "--cpu-workers", "1", "--port", str(port)], cwd=ROOT, env={
        **env, "CHORD_DATA_DIR": str(data), "CHORD_API_KEY": KEY,
        "CHORD_MEDIA_ROOTS": str(data / "media")}, stdout=subprocess.DEVNULL,
        stderr=(data / "serve.log").open("w"))
    health: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            health.append(_get(port, "/health", key=False)[0])
            time.sleep(0.1)

    try:
        _wait_ready(port, proc)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        first_s, doc = _get(port, "/v1/search?q=person")
        started = time.monotonic()
        while not doc.get("index", {}).get("complete"):
            time.sleep(0.5)
            _, doc = _get(port, "/v1/search?q=person")
        caught_up_s = time.monotonic() - started
        stop.set()
        sampler.join(5)
    finally:
        proc.terminate()
        proc.wait(20)
    print(f"results={args.results} passages={args.results * 10} first_search_s={first_s:.3f} "
          f"caught_up_s={caught_up_s:.1f} health_p50_s={statistics.median(health):.4f} "
          f"health_max_s={max(health):.4f} health_samples={len(health)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
