"""Entailment on a Qwen3-VL Thinking checkpoint (issue 31): what reasoning before the answer
costs against scoring the first token, on the same weights, images and statements.

    python3 benchmarks/thinking.py --shape 8b --pairs 64 --think-tokens 64,256,1024
    python3 benchmarks/thinking.py --cpu          # test-qwen3-thinking on the CPU (harness smoke)

* ``first_token``: one prefill per batch, the answer word's probability at the first generated
  position (Chord's path for Instruct models; meaningless on a Thinking model, whose first token
  is "So"/"Got", but the cost floor);
* ``thinking_<n>``: each pair reasons for up to ``n`` tokens, the block is closed, and a second
  prefill scores the answer word after ``</think>`` (``analysis/entail_think.py``).

Random weights never write ``</think>``, so every row reasons for its whole budget: the figures
are the cost of a budget, an upper bound for a trained model that closes its reasoning sooner.
``forced_share`` says how many rows hit the budget. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chord_core.config import ModelConfig  # noqa: E402


def checkpoint(args: argparse.Namespace) -> tuple[str, str]:
    """(model, device): the tiny Thinking checkpoint on the CPU, or the shape built on cuda:0
    with the Thinking chat template."""
    if args.cpu:
        return "test-qwen3-thinking", "cpu"
    from chord_core.testing.tiny_qwen3 import build_checkpoint

    ckpt = Path(args.ckpt.format(shape=args.shape))
    if not (ckpt / "config.json").exists():
        t0 = time.perf_counter()
        build_checkpoint(ckpt, shape=args.shape, device="cuda", thinking=True)
        print(f"built {ckpt} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return str(ckpt), "cuda:0"


def images(n: int, side: int) -> list:
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.integers(0, 255, (side, side, 3), dtype=np.uint8) for _ in range(n)]


def run(lm, imgs: list, batch: int, think_tokens: int | None) -> dict:
    """Score every image once (after one warm-up batch); pairs/s and the forced share."""
    from chord_core.analysis.entailment import score_images

    statements = [f"the picture shows object number {i}" for i in range(len(imgs))]
    score_images(lm, imgs[:batch], statements[:batch], batch_size=batch,
                 think_tokens=think_tokens)
    t0 = time.perf_counter()
    scores, _, _ = score_images(lm, imgs, statements, batch_size=batch,
                                think_tokens=think_tokens)
    seconds = time.perf_counter() - t0
    forced = sum(1 for s in scores if s.reasoning_cut) / max(1, len(scores))
    return {"pairs": len(scores), "seconds": round(seconds, 3),
            "pairs_per_s": round(len(scores) / seconds, 3), "forced_share": forced}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="8b", choices=("2b", "4b", "8b"))
    ap.add_argument("--ckpt", default="/tmp/chord-rand-q3-{shape}-thinking")
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--side", type=int, default=448, help="image side (≈ 196 visual tokens)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--think-tokens", default="64,256,1024")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "thinking.json"))
    args = ap.parse_args()
    if args.cpu:
        args.pairs, args.side, args.batch, args.think_tokens = 4, 64, 2, "4"
    model, device = checkpoint(args)
    from chord_core.analysis.engine import Engine

    lm = Engine(ModelConfig(model=model, device=device, batch_size=args.batch)).load()
    first = replace(lm, info=replace(lm.info, thinking=False))  # same weights, first token
    imgs = images(args.pairs, args.side)
    res: dict = {"shape": "tiny" if args.cpu else args.shape, "device": device,
                 "thinking_checkpoint": lm.info.thinking, "side": args.side,
                 "batch": args.batch, "first_token": run(first, imgs, args.batch, None)}
    for n in (int(v) for v in args.think_tokens.split(",")):
        res[f"thinking_{n}"] = run(lm, imgs, args.batch, n)
        res[f"thinking_{n}"]["cost_vs_first_token"] = round(
            res["first_token"]["pairs_per_s"] / res[f"thinking_{n}"]["pairs_per_s"], 2)
        Path(args.out).write_text(json.dumps(res, indent=2))
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
