"""Ask across the library, timed (issue 39: ≤ 3 s a question with 5 hits checked on one
H200 with the 7B): a store of stored describe results on real synthetic clips (each text
names a few of a small vocabulary of objects), then questions asked through
``chord_core.library.ask`` with one model in this process (``in_process_manager``: the CLI's
path; the app and the service use their workers). Prints JSON: per question the search, the
check and the total in ms, and their p50/p95 over the questions after the first (the first
pays the model's first request).

    python benchmarks/ask_latency.py --model test                       # CPU, tiny model
    python benchmarks/ask_latency.py --model /tmp/chord-rand-7b --device cuda   # the device
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("forklift", "pallet", "person", "truck", "ladder", "dog", "van", "gate")


def fill(store_path: Path, media: Path, clips: int, seconds: float) -> None:
    from chord_core.runtime.store import Store
    from chord_core.testing.library_docs import result_doc, store_result
    from chord_core.testing.videos import make_video

    rng = random.Random(3)
    with Store(store_path) as store:
        for n in range(clips):
            clip = make_video(media / f"cam{n:03d}.mp4", duration_s=seconds, fps=10.0,
                              size_wh=(640, 360), seed=n).path
            seen = rng.sample(WORDS, 3)
            text = f"A {seen[0]} passes a {seen[1]} near the {seen[2]}."
            store_result(store, f"j-{n:04d}", result_doc("describe", str(clip), text=text,
                                                         duration_s=seconds))


def main() -> int:
    from chord_core.config import model_config_from_env
    from chord_core.library.ask import ask
    from chord_core.library.index import LibraryIndex
    from chord_core.runtime.cluster import in_process_manager

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="test")
    ap.add_argument("--device", default=None)
    ap.add_argument("--clips", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--check", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="chord-ask-"))
    (tmp / "media").mkdir()
    fill(tmp / "chord.sqlite3", tmp / "media", args.clips, args.seconds)
    cfg = model_config_from_env(model=args.model, device=args.device)
    started = time.perf_counter()
    manager = in_process_manager(cfg.with_overrides(compile=False))
    manager.wait_ready(1800)
    load_s = time.perf_counter() - started
    rows = []
    try:
        with LibraryIndex(tmp / "chord.sqlite3") as index:
            for q in range(args.questions):
                word = WORDS[q % len(WORDS)]  # in ~3/8 of the clips: more hits than checked
                doc = ask(index, f"a {word}", manager, cfg.model, check=args.check)
                rows.append({"question": doc["question"], "checked": doc["checked"],
                             **doc["timings_ms"]})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        manager.shutdown()
    warm = rows[1:] or rows

    def pct(key: str, p: float) -> float:
        values = sorted(r[key] for r in warm)
        return round(values[min(len(values) - 1, int(p * len(values)))], 1)

    out = {"model": cfg.model, "device": args.device or "auto", "clips": args.clips,
           "check": args.check, "load_s": round(load_s, 1), "questions": rows,
           "p50_ms": {k: round(statistics.median(r[k] for r in warm), 1)
                      for k in ("search", "check", "total")},
           "p95_ms": {k: pct(k, 0.95) for k in ("search", "check", "total")}}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    import os

    os._exit(code)  # the in-process worker's native threads can abort a normal exit
