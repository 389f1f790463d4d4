"""FP8 prefill products (``CHORD_FP8=1``, ``model/fp8.py``) against bf16, on the same weights
in one process: the two passes issues 34 and 36 are bound by.

    python3 benchmarks/fp8_prefill.py --model /tmp/chord-rand-7b-vocab --out $OUT/fp8.json

* ``entail``: one 32-pair entailment pass (448×448 images and their statements, as
  ``entailment._prefill`` runs it), bf16 and FP8 alternated three times, medians of 5 each;
  with how far FP8 moved the answer (each row's entailment probability, its label, and the
  last position's logits relative to bf16's).
* ``ground``: one long-clip grounding prefill of ``--ground-rows`` 448×252 frames (the
  long-clip size; the model's forward to the last position), the same way.
* ``gemm``: one language-model MLP (3,584 → 18,944 gate/up, 18,944 → 3,584 down) at the
  entailment pass's token count, bf16 ``F.linear`` against ``fp8_linear`` (its per-token
  scaling included), TFLOP/s.

Random weights: the agreement figures say how far the products moved the numbers, not whether a
trained model's answers stay right. ``--device cpu --model test`` checks the script here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from bench_common import timed  # also puts the repository on sys.path


def _ab(model, fn, rounds: int, repeats: int) -> dict:
    """``fn`` timed with bf16 products and with FP8 ones, alternated ``rounds`` times."""
    import torch

    from chord_core.model import fp8

    runs: dict = {"bf16_s": [], "fp8_s": []}
    with torch.inference_mode():
        for _ in range(rounds):
            with fp8.disabled(model):
                fn()
                runs["bf16_s"].append(timed(fn, repeats)[0])
            fn()
            runs["fp8_s"].append(timed(fn, repeats)[0])
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {**runs, "bf16_median_s": round(med["bf16_s"], 4),
            "fp8_median_s": round(med["fp8_s"], 4),
            "speedup": round(med["bf16_s"] / med["fp8_s"], 3)}


def _agreement(lm, inputs) -> dict:
    """How far FP8 moved one pass's answers: entailment probability per row, the label, the
    last position's logits."""
    import torch

    from chord_core.analysis import entailment as ent
    from chord_core.model import fp8

    def run():
        logits = lm.model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1].float()
        return logits, ent._scores(lm, logits, inputs["attention_mask"].sum(-1).tolist())

    with torch.inference_mode():
        with fp8.disabled(lm.model):
            ref_logits, ref = run()
        logits, ours = run()
    dp = [abs(a.probabilities["entailment"] - b.probabilities["entailment"])
          for a, b in zip(ours, ref)]

    def label(s):
        return max(s.probabilities, key=s.probabilities.get)

    return {"max_abs_dp_entailment": round(max(dp), 5),
            "mean_abs_dp_entailment": round(statistics.fmean(dp), 5),
            "labels_same": sum(label(a) == label(b) for a, b in zip(ours, ref)),
            "rows": len(ref),
            "logits_rel_err": round(float((logits - ref_logits).norm() / ref_logits.norm()), 5)}


def _gemm(tokens: int, device: str, hidden: int, inter: int) -> dict:
    import torch
    import torch.nn.functional as F

    from chord_core.model import fp8

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    up = torch.randn(2 * inter, hidden, device=device, dtype=dtype) * 0.02
    down = torch.randn(hidden, inter, device=device, dtype=dtype) * 0.02
    a = torch.randn(tokens, inter, device=device, dtype=dtype)
    (qu, su), (qd, sd) = fp8.quantize_weight(up), fp8.quantize_weight(down)

    def exact():
        F.linear(x, up), F.linear(a, down)

    def ours():
        fp8.fp8_linear(x, qu, su, None), fp8.fp8_linear(a, qd, sd, None)

    flop = 2 * tokens * hidden * 2 * inter + 2 * tokens * inter * hidden
    with torch.inference_mode():
        exact(), ours()
        t_b, t_f = timed(exact, 20)[0], timed(ours, 20)[0]
    return {"tokens": tokens, "bf16_ms": round(1e3 * t_b, 3), "fp8_ms": round(1e3 * t_f, 3),
            "bf16_tflops": round(flop / t_b / 1e12, 1), "fp8_tflops": round(flop / t_f / 1e12, 1),
            "speedup": round(t_b / t_f, 3)}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--ground-rows", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "fp8.json"))
    return ap


def main() -> int:
    args = parser().parse_args()
    import numpy as np

    from chord_core.analysis import entailment as ent
    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig
    from chord_core.model import loading as m

    lm = Engine(ModelConfig(model=args.model, device=args.device, compile=False,
                            fp8=True)).load()
    if not lm.info.fp8:
        print("FP8 products were not installed (the log says why)", file=sys.stderr)
        return 2
    cuda = args.device.startswith("cuda")
    rounds, repeats = (args.rounds, 5) if cuda else (1, 1)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (448, 448, 3), dtype=np.uint8) for _ in range(args.pairs)]
    statements = [f"the picture shows object number {i}" for i in range(args.pairs)]
    inputs = ent._inputs(lm, images, statements).to(lm.input_device)
    tokens = int(inputs["attention_mask"].sum())
    res: dict = {"device": args.device, "model": args.model, "pairs": args.pairs,
                 "tokens": tokens}
    if cuda:
        import torch

        res["gpu"] = torch.cuda.get_device_name(args.device)
    res["entail"] = _ab(lm.model, lambda: ent._prefill(lm, inputs), rounds, repeats)
    res["entail"]["agreement"] = _agreement(lm, inputs)
    print(json.dumps({"entail": res["entail"]}), flush=True)
    if args.ground_rows:
        frames = [rng.integers(0, 255, (252, 448, 3), dtype=np.uint8)
                  for _ in range(args.ground_rows)]
        g = m.build_image_inputs(lm, frames, "the person in a red jacket").to(lm.input_device)

        def prefill():
            return lm.model(**g, use_cache=False, logits_to_keep=1).logits

        res["ground"] = {"rows": args.ground_rows,
                         "tokens": int(g["attention_mask"].sum()),
                         **_ab(lm.model, prefill, rounds, max(1, repeats - 2))}
        print(json.dumps({"ground": res["ground"]}), flush=True)
    text = lm.model.config.get_text_config()
    res["gemm"] = _gemm(tokens if cuda else 512, args.device, text.hidden_size,
                        text.intermediate_size)
    print(json.dumps({"gemm": res["gemm"]}), flush=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
