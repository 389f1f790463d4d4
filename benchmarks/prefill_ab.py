"""The prefill's opt-in levers against the default, on the same weights in one process:
``CHORD_FUSE`` (``model/fused.py``: norms and gated activations as fused kernels) and
``CHORD_FP8`` (``model/fp8.py``: the language model's projections as FP8 products), alone
and together, on the two passes issues 34 and 36 are bound by.

    python3 benchmarks/prefill_ab.py --model /tmp/chord-rand-7b-vocab --out $OUT/prefill_ab.json
    python3 benchmarks/prefill_ab.py --variants tower ...   # the vision attention's changes

* ``entail``: one 32-pair entailment pass (448×448 images and their statements, as
  ``entailment._prefill`` runs it), the four variants round-robin three times, medians of 5
  each; with how far each variant moved the answers against the default (each row's
  entailment probability, its label, the last position's logits). Then the same pass's
  vision tower alone (``entail_tower``: its time and share of the pass, per variant).
* ``ground``: one long-clip grounding prefill of ``--ground-rows`` 448×252 frames (the
  long-clip size; the model's forward to the last position), the same way.
* ``gemm``: one language-model MLP (3,584 → 18,944 gate/up, 18,944 → 3,584 down) at the
  entailment pass's token count, bf16 ``F.linear`` against ``fp8_linear`` (its per-token
  scaling included), TFLOP/s.

Each row also has ``gflop``, the products the pass needs (``pass_flops.py``: the tower's, the
language model's, the total; the fewest any variant makes) and ``tflops``, each variant's median as TFLOP/s of them: how
far a pass is from the card's roof (the ``gemm`` row's bf16 figure is one MLP's at that roof).

The first fused call compiles its two kernels (a warm-up call before timing takes it).
Random weights: the agreement figures say how far the numbers moved, not whether a trained
model's answers stay right. ``--device cpu --model test`` checks the script here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pass_flops
from bench_common import timed  # also puts the repository on sys.path


SETS = {
    # the two levers, alone and together (the vision tower's attention as shipped)
    "levers": ("default", "fused", "fp8", "fp8+fused"),
    # the vision tower's attention and rotary, 2026-12-07: "unfused" is session 10's default
    # (grouped SDPA, nothing fused), "s11" session 11's GPU default (norms and gated MLPs
    # fused), "s11+varlen" that with the varlen flash kernel, "now" with the vision rotary
    # fused too (this default); "untrimmed" is "now" with every position through the
    # language model's last MLP (session 13: ``last_mlp``, the kept position only)
    "tower": ("unfused", "s11", "s11+varlen", "now", "untrimmed"),
    # which fused kinds pay (session 13's H100 had session 11's fused norms and activations
    # slower than none): "rope-only" is "now" with the norms and gated MLPs unfused
    "kinds": ("now", "rope-only", "unfused"),
}


_ALL = ("norm", "mlp", "rope")
# name: (FP8 products on, fused kinds put back to the modules' own, varlen kernel, last MLP
# trimmed). One table: the names were matched as substrings before, and "fused" is inside
# "unfused", so that variant ran with every kind fused (sessions 12 and 13).
VARIANTS = {
    "default": (False, _ALL, True, True), "fused": (False, (), True, True),
    "fp8": (True, _ALL, True, True), "fp8+fused": (True, (), True, True),
    "unfused": (False, _ALL, False, False), "s11": (False, ("rope",), False, False),
    "s11+varlen": (False, ("rope",), True, False), "now": (False, (), True, True),
    "untrimmed": (False, (), True, False), "rope-only": (False, ("norm", "mlp"), True, True),
}


@contextmanager
def _variant(model, name: str):
    """``model`` (loaded with both levers) with only ``name``'s levers on (``VARIANTS``)."""
    from chord_core.model import fastvision, fp8, fused, last_mlp

    on_fp8, unfused, varlen, trim = VARIANTS[name]
    with ExitStack() as stack:
        if not trim:
            stack.enter_context(last_mlp.disabled(model))
        if not on_fp8:
            stack.enter_context(fp8.disabled(model))
        if unfused:
            stack.enter_context(fused.disabled(model, kinds=unfused))
        stack.callback(setattr, fastvision, "VARLEN", fastvision.VARLEN)
        fastvision.VARLEN = varlen
        yield


def _ab(model, fn, rounds: int, repeats: int, variants: tuple[str, ...]) -> dict:
    """``fn`` timed in each variant, round-robin ``rounds`` times; medians and speed-ups
    against the first variant."""
    import torch

    runs: dict = {v: [] for v in variants}
    with torch.inference_mode():
        for _ in range(rounds):
            for v in variants:
                with _variant(model, v):
                    fn()
                    runs[v].append(timed(fn, repeats)[0])
    med = {v: statistics.median(t) for v, t in runs.items()}
    return {"runs_s": runs, "median_s": {v: round(t, 4) for v, t in med.items()},
            "speedup": {v: round(med[variants[0]] / t, 3) for v, t in med.items()}}


def _agreement(lm, inputs, variants: tuple[str, ...]) -> dict:
    """How far each variant moved one pass's answers against the default: entailment
    probability per row, the label, the last position's logits."""
    import torch

    from chord_core.analysis import entailment as ent

    def run(v):
        with _variant(lm.model, v), torch.inference_mode():
            logits = lm.model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1]
            logits = logits.float()
            return logits, ent._scores(lm, logits, inputs["attention_mask"].sum(-1).tolist())

    def label(s):
        return max(s.probabilities, key=s.probabilities.get)

    ref_logits, ref = run(variants[0])
    out = {}
    for v in variants[1:]:
        logits, ours = run(v)
        dp = [abs(a.probabilities["entailment"] - b.probabilities["entailment"])
              for a, b in zip(ours, ref)]
        out[v] = {"max_abs_dp_entailment": round(max(dp), 5),
                  "mean_abs_dp_entailment": round(statistics.fmean(dp), 5),
                  "labels_same": sum(label(a) == label(b) for a, b in zip(ours, ref)),
                  "rows": len(ref),
                  "logits_rel_err": round(float((logits - ref_logits).norm()
                                                / ref_logits.norm()), 5)}
    return out


def _roof(row: dict, model, fn, variants: tuple[str, ...]) -> None:
    """The products the pass needs (``pass_flops``: the fewest any variant makes, since
    ``last_mlp`` leaves some out) and each variant's median as TFLOP/s of them, into
    ``row``."""
    counts = []
    for v in variants:
        with _variant(model, v):
            counts.append(pass_flops.count(model, fn))
    need = min(counts, key=lambda c: c["total"])
    row["gflop"] = {k: round(v / 1e9, 3) for k, v in need.items()}
    row["tflops"] = pass_flops.achieved(need["total"], row["median_s"])


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
    ap.add_argument("--variants", choices=sorted(SETS), default="levers",
                    help="levers: default, CHORD_FUSE, CHORD_FP8, both; tower: the vision "
                         "attention's varlen kernel and fused rotary against session 10's "
                         "and 11's defaults")
    ap.add_argument("--no-gemm", action="store_true", help="leave out the MLP GEMM row")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                  "prefill_ab.json"))
    return ap


def main() -> int:
    args = parser().parse_args()
    variants = SETS[args.variants]
    import numpy as np

    from chord_core.analysis import entailment as ent
    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig
    from chord_core.model import loading as m

    from chord_core.model import fastvision, fused

    lm = Engine(ModelConfig(model=args.model, device=args.device, compile=False, fp8=True,
                            fuse=True)).load()
    if not lm.info.fp8 or not fused.installed(lm.model):
        print("FP8 products or fused kernels were not installed (the log says why)",
              file=sys.stderr)
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
    res["entail"] = _ab(lm.model, lambda: ent._prefill(lm, inputs), rounds, repeats,
                         variants)
    res["entail"]["agreement"] = _agreement(lm, inputs, variants)
    _roof(res["entail"], lm.model, lambda: ent._prefill(lm, inputs), variants)
    print(json.dumps({"entail": res["entail"]}), flush=True)
    # the same pass's vision tower alone: its share of the pass, and what each variant moved
    tower = fastvision.vision_tower(lm.model)

    def tower_pass():
        return tower(inputs["pixel_values"], inputs["image_grid_thw"])

    res["entail_tower"] = _ab(lm.model, tower_pass, rounds, repeats, variants)
    res["entail_tower"]["tower_share"] = {
        v: round(t / res["entail"]["median_s"][v], 3)
        for v, t in res["entail_tower"]["median_s"].items()}
    _roof(res["entail_tower"], lm.model, tower_pass, variants)
    print(json.dumps({"entail_tower": res["entail_tower"]}), flush=True)
    if args.ground_rows:
        frames = [rng.integers(0, 255, (252, 448, 3), dtype=np.uint8)
                  for _ in range(args.ground_rows)]
        g = m.build_image_inputs(lm, frames, "the person in a red jacket").to(lm.input_device)

        def prefill():
            return lm.model(**g, use_cache=False, logits_to_keep=1).logits

        res["ground"] = {"rows": args.ground_rows,
                         "tokens": int(g["attention_mask"].sum()),
                         **_ab(lm.model, prefill, rounds, max(1, repeats - 2), variants)}
        _roof(res["ground"], lm.model, prefill, variants)
        print(json.dumps({"ground": res["ground"]}), flush=True)
    text = lm.model.config.get_text_config()
    res["variants"] = list(variants)
    if args.no_gemm:
        Path(args.out).write_text(json.dumps(res, indent=2))
        return 0
    res["gemm"] = _gemm(tokens if cuda else 512, args.device, text.hidden_size,
                        text.intermediate_size)
    print(json.dumps({"gemm": res["gemm"]}), flush=True)
    Path(args.out).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
