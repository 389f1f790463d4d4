"""Where W1's wall time goes (issue 36): ``describe_many`` over N clips with every phase's
start and end recorded, per thread, then the time the main thread spent in each and how much
of the reader threads' work ran while the main thread was generating (overlap).

    python3 benchmarks/w1_phases.py --cpu                    # test model on the CPU
    python3 benchmarks/w1_phases.py --ckpt /tmp/chord-rand-7b-vocab --batches 0,8   # one GPU

Phases are the real functions wrapped (nothing else changes): ``read`` (probe + frame
decode of one clip, reader threads), ``inputs`` (the model inputs of a batch: pixels,
tokens), ``generate`` (prefill + decode, ends when the tokens are on the host), ``text``
(detokenising). A batch streamed in parts builds its later parts' inputs inside the
generate call (``inputs_inside_generate_s``; ``generate`` includes them). ``other`` is the
main thread's time in none of them. On the CPU the model is
the tiny test model, so ``generate`` is small and the CPU phases are what a GPU host pays too
(their size does not depend on the model); the figures are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import describe_req, make_clips  # noqa: E402

from chord_core.config import ModelConfig, SamplingConfig  # noqa: E402

EVENTS: list[tuple[str, str, float, float]] = []  # (phase, thread, start, end)


def _wrap(owner, name: str, phase: str) -> None:
    fn = getattr(owner, name)

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            EVENTS.append((phase, threading.current_thread().name, t0, time.perf_counter()))

    setattr(owner, name, timed)


def instrument(engine) -> None:
    from chord_core.analysis import describe_batch
    from chord_core.model import loading

    _wrap(describe_batch, "_prepare_describe", "read")
    _wrap(loading, "build_video_batch", "inputs")
    _wrap(loading, "_generate", "generate")
    _wrap(engine.load().processor, "batch_decode", "text")


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _overlap(spans, others) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in spans for c, d in others)


def summary(wall: float, t0: float) -> dict:
    main = threading.main_thread().name
    out: dict = {"wall_s": wall}
    for phase in ("read", "inputs", "generate", "text"):
        spans = [(a, b) for p, th, a, b in EVENTS if p == phase and a >= t0]
        mine = [(a, b) for p, th, a, b in EVENTS if p == phase and th == main and a >= t0]
        out[f"{phase}_s_all_threads"] = sum(b - a for a, b in spans)
        out[f"{phase}_s_main"] = sum(b - a for a, b in mine)
        out[f"{phase}_n"] = len(spans)
    gen = [(a, b) for p, th, a, b in EVENTS if p == "generate" and a >= t0]
    off_main = [(a, b) for p, th, a, b in EVENTS
                if p in ("read", "inputs") and th != main and a >= t0]
    out["reader_work_during_generate_s"] = _overlap(off_main, gen)
    # a batch streamed in parts builds its later parts' inputs inside the generate call
    inputs_main = [(a, b) for p, th, a, b in EVENTS if p == "inputs" and th == main and a >= t0]
    out["inputs_inside_generate_s"] = _overlap(inputs_main, gen)
    busy = sum(out[f"{p}_s_main"] for p in ("read", "inputs", "generate", "text"))
    out["other_main_s"] = wall - busy + out["inputs_inside_generate_s"]
    out["timeline"] = [(p, th, round(a - t0, 4), round(b - t0, 4))
                       for p, th, a, b in sorted(EVENTS, key=lambda e: e[2]) if a >= t0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="the test model on the CPU")
    ap.add_argument("--ckpt", default="/tmp/chord-rand-7b-vocab")
    ap.add_argument("--clips", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--batches", default="0",
                    help="describe_many batch_size for each run, comma-separated (0: default)")
    ap.add_argument("--seconds", type=float, default=15.0, help="clip length (2 fps: 30 frames)")
    ap.add_argument("--wh", default="448x252")
    ap.add_argument("--timeline", action="store_true", help="print every phase's span")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    from chord_core.analysis.engine import Engine
    from chord_core.testing.tiny_model import build_checkpoint

    if args.cpu:
        model, device = "test", "cpu"
    else:
        if not (Path(args.ckpt) / "config.json").exists():
            build_checkpoint(args.ckpt, shape="7b", device="cuda")
        model, device = args.ckpt, "cuda:0"
    w, h = (int(x) for x in args.wh.split("x"))
    root = Path(os.environ.get("CHORD_BENCH_DIR", "/tmp/chord-w1-phases"))
    clips = make_clips(root, args.clips, args.seconds, (w, h))
    reqs = [describe_req(c, args.tokens, SamplingConfig(fps=2.0)) for c in clips]
    engine = Engine(ModelConfig(model=model, device=device))
    engine.load()
    instrument(engine)
    runs = []
    for batch in (int(b) for b in args.batches.split(",")):
        kw = {"batch_size": batch} if batch else {}
        engine.describe_many(reqs[:2], **kw)  # warm-up
        engine.describe_many(reqs, **kw)  # warm-up at the timed batch size (graphs captured)
        _sync()
        t0 = time.perf_counter()
        results = engine.describe_many(reqs, **kw)
        wall = time.perf_counter() - t0
        bad = [r for r in results if not hasattr(r, "text")]
        if bad:
            raise SystemExit(f"{len(bad)} clips failed: {bad[:2]}")
        res = summary(wall, t0)
        res.update(clips=len(reqs), clips_per_min=60 * len(reqs) / wall, device=device,
                   frames=results[0].sampling.num_frames, batch=batch or "default")
        if not args.timeline:
            res.pop("timeline")
        runs.append(res)
    text = json.dumps(runs, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
