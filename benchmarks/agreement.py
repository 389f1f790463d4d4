"""Do replicas and a sharded model compute the same function as one GPU? Logit-level check.

    python3 benchmarks/agreement.py --ckpt /tmp/chord-rand-7b --out agreement.json

Greedy text is a poor witness with random weights: their next-token logits are nearly flat,
so the last-bit differences of bf16 kernels flip the argmax after a few tokens — even between
two runs on the same GPU (see docs/benchmarks.md). This check compares what does not depend
on ties: the prefill logits of the same inputs on each placement, against the first one,
relative to the logits' own spread, plus the greedy token ids (shared prefix) and a re-run on
the first placement as the noise floor. Placements: ``cuda:0``, ``cuda:1``, and the model
sharded over both (``device_map="auto"`` with a per-GPU cap that forces a split). Loading goes
through ``chord_core.model.loading.load_model`` (the workers' code); inputs through the processor.
``--cpu`` runs the same check on the CPU with the tiny model (harness smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import clip_inputs  # noqa: E402

from chord_core.config import SamplingConfig  # noqa: E402


def _run(lm, clip: str, tokens: int) -> tuple:
    import torch

    inputs = clip_inputs(lm, [clip], SamplingConfig(fps=2.0), "Describe this video.")
    with torch.inference_mode():
        logits = lm.model(**inputs).logits[0, -1].float().cpu()
        out = lm.model.generate(**inputs, max_new_tokens=tokens, min_new_tokens=tokens,
                                do_sample=False)
    ids = out[0, inputs["input_ids"].shape[1]:].tolist()
    fast = None
    if lm.decoder is not None:  # the default (fast) decoder on the same placement
        fast = lm.decoder.generate(inputs, tokens, min_new_tokens=tokens)[0].tolist()
    return logits, ids, fast


def _compare(ref: tuple, other: tuple) -> dict:
    (la, ia, fa), (lb, ib, fb) = ref, other
    diff = (la - lb).abs()
    out = {"max_abs_logit_diff": float(diff.max()), "logit_std": float(la.std()),
           "rel_max_diff": float(diff.max() / la.std().clamp_min(1e-12)),
           "top1_equal": bool(la.argmax() == lb.argmax()),
           "shared_token_prefix": _shared(ia, ib), "tokens": len(ia)}
    if fa is not None and fb is not None:
        out["fast_decoder_shared_prefix"] = _shared(fa, fb)
        out["fast_decoder_identical"] = fa == fb
    return out


def _shared(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default="/tmp/chord-rand-7b")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--shard-cap", default="9GiB", help="GPU 0 cap that forces a 2-GPU split")
    ap.add_argument("--cpu", action="store_true", help="smoke test on CPU with the tiny model")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "agreement.json"))
    args = ap.parse_args()
    from chord_core.config import ModelConfig
    from chord_core.model.loading import load_model, release_memory
    from chord_core.testing.videos import make_video

    clip = str(make_video("/tmp/chord-agree.mp4", duration_s=6.0, fps=10.0,
                          size_wh=(448, 252)).path)
    model = "test" if args.cpu else args.ckpt
    placements = {"first": ModelConfig(model=model, device="cpu" if args.cpu else "cuda:0")}
    if not args.cpu:
        placements["second_gpu"] = ModelConfig(model=model, device="cuda:1")
        placements["shard"] = ModelConfig(model=model, device="auto",
                                          max_memory=f"0:{args.shard_cap},1:0.9")
    results, report = {}, {}
    for name, cfg in placements.items():
        lm = load_model(cfg)
        report[f"{name}_device_map"] = sorted(set(lm.info.device_map.values()))
        results[name] = _run(lm, clip, args.tokens)
        if name == "first":
            results["first_rerun"] = _run(lm, clip, args.tokens)
        del lm
        release_memory()
    for name in results:
        if name != "first":
            report[name] = _compare(results["first"], results[name])
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
