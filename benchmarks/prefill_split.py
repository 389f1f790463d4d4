"""Where one entailment pass's prefill goes (issue 13): the vision tower against the language
model, and how busy the GPU is inside the pass.

    python3 benchmarks/prefill_split.py --model /tmp/chord-rand-7b --pairs 32 --out $OUT/split.json

One pass of ``--pairs`` 448×448 images with their statements, as ``entailment._prefill`` runs
it; medians of 5. ``vision_s``: the vision tower alone on the same pixels; ``lm_s`` = pass −
vision. ``gpu_busy_pct``: CUDA kernel time over the pass's wall time (torch profiler, one
pass); below 100 the GPU waited for the host. The top kernels are listed by time, for the
pass and (``vision_*``) for the vision tower alone. ``align_ab``: the tower and the pass with
the vision MLP at its own width (3,420 on Qwen2.5-VL) against the aligned one the load
installs (``model/mlp_align.py``), alternated 3 times, medians of 5 each; ``gemm_ab`` the
tower's MLP GEMMs alone at both widths. ``--ground-rows 128``: the same for one long-clip
grounding call (``_ground_split``), with its decode apart. ``--device cpu --model test``
checks the script here (operators by CPU time instead of kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench_common import timed  # also puts the repository on sys.path


def _profiled(prefix: str, fn, cuda: bool) -> dict:
    """One call of ``fn`` under the torch profiler: on a GPU the share of the wall its
    kernels kept the GPU busy and the top kernels by time; on the CPU (a check of this
    script with the test model) the top operators by their own CPU time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        t = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        wall = time.perf_counter() - t
    out: dict = {f"{prefix}profiled_wall_s": round(wall, 4)}
    if cuda:
        events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
        kernel_us = sum(e.self_device_time_total for e in events)
        out[f"{prefix}gpu_busy_pct"] = round(100 * kernel_us / 1e6 / wall, 1)
        out[f"{prefix}top_kernels"] = [
            (e.key[:90], round(e.self_device_time_total / 1e3, 2), e.count)
            for e in sorted(events, key=lambda e: -e.self_device_time_total)[:15]]
    out[f"{prefix}top_cpu_ops"] = [
        (e.key[:60], round(e.self_cpu_time_total / 1e3, 2), e.count)
        for e in sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]]
    return out


def _tower_call(lm, inputs):
    """The vision tower alone on ``inputs``' pixels, as a call to time."""
    model = lm.model.model if hasattr(lm.model, "model") else lm.model
    return lambda: model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"])


def _align_ab(lm, vision, prefill, repeats: int = 5) -> dict:
    """The tower and the pass, narrow (the checkpoint's width) against aligned, alternated."""
    import torch

    from chord_core.model import mlp_align

    runs: dict = {"narrow_vision_s": [], "aligned_vision_s": [], "narrow_pass_s": [],
                  "aligned_pass_s": []}
    with torch.inference_mode():
        for _ in range(3):
            with mlp_align.disabled(lm.model):
                vision(), prefill()
                runs["narrow_vision_s"].append(timed(vision, repeats)[0])
                runs["narrow_pass_s"].append(timed(prefill, repeats)[0])
            vision(), prefill()
            runs["aligned_vision_s"].append(timed(vision, repeats)[0])
            runs["aligned_pass_s"].append(timed(prefill, repeats)[0])
    med = {k: sorted(v)[1] for k, v in runs.items()}
    return {**runs, "vision_ratio": round(med["narrow_vision_s"] / med["aligned_vision_s"], 3),
            "pass_ratio": round(med["narrow_pass_s"] / med["aligned_pass_s"], 3)}


def _gemm_ab(rows: int, device: str) -> dict:
    """One vision block's MLP GEMMs (bf16, ``rows`` patches): gate/up 1280 → width and down
    width → 1280, at 3,420 and 3,456, and Qwen3-VL's 4,304 against 4,352; ms, median of 20."""
    import torch

    out = {}
    x = torch.randn(rows, 1280, device=device, dtype=torch.bfloat16)
    for width in (3420, 3456, 4304, 4352):
        up = torch.randn(width, 1280, device=device, dtype=torch.bfloat16)
        down = torch.randn(1280, width, device=device, dtype=torch.bfloat16)

        def mlp():
            torch.nn.functional.linear(torch.nn.functional.linear(x, up), down)

        mlp()
        t = timed(mlp, 20)[0]
        out[f"up_down_{width}_ms"] = round(1e3 * t, 3)
        out[f"tflops_{width}"] = round(4 * rows * 1280 * width / t / 1e12, 1)
    return out


def _ground_split(lm, rows: int, tokens: int, cuda: bool) -> dict:
    """One long-clip grounding call as ``loading._ground_batch`` makes it: ``rows`` frames
    of 448×252 (the long-clip size), one target, ``tokens`` answer tokens forced (random
    weights stop anywhere). ``prefill_s``: the model's forward over the batch (last
    position's logits), ``vision_s`` the tower alone, ``generate_s`` the decoder's whole call
    (its prefill, then ``tokens`` steps); ``decode_s`` = generate − prefill. Medians of 3; the
    vision MLP narrow against aligned as in ``align_ab``; the prefill profiled."""
    import numpy as np
    import torch

    from chord_core.model import loading as m

    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (252, 448, 3), dtype=np.uint8) for _ in range(rows)]
    inputs = m.build_image_inputs(lm, images, "the person in a red jacket").to(lm.input_device)
    vision = _tower_call(lm, inputs)

    def prefill():
        return lm.model(**inputs, use_cache=False, logits_to_keep=1).logits

    def generate():
        return m._generate(lm, inputs, tokens, tokens, None)

    with torch.inference_mode():
        generate(), prefill(), vision()  # warm-up: the graphs of this batch captured here
        out = {"rows": rows, "tokens_per_row": round(float(inputs["attention_mask"].sum())
                                                     / rows, 1),
               "prefill_s": timed(prefill, 3)[0], "vision_s": timed(vision, 3)[0],
               "generate_s": timed(generate, 3)[0]}
    out["decode_s"] = out["generate_s"] - out["prefill_s"]
    out["frames_per_s"] = round(rows / out["generate_s"], 1)
    out["align_ab"] = _align_ab(lm, vision, prefill, repeats=2)
    with torch.inference_mode():
        out.update(_profiled("prefill_", prefill, cuda))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--ground-rows", type=int, default=0,
                    help="also split one grounding generate call of this many 448×252 "
                         "frames (the long-clip default is 128): prefill, vision, decode")
    ap.add_argument("--ground-tokens", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "split.json"))
    args = ap.parse_args()
    import numpy as np
    import torch

    from chord_core.analysis import entailment as ent
    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig

    lm = Engine(ModelConfig(model=args.model, device=args.device, compile=False)).load()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (448, 448, 3), dtype=np.uint8) for _ in range(args.pairs)]
    statements = [f"the picture shows object number {i}" for i in range(args.pairs)]
    inputs = ent._inputs(lm, images, statements).to(lm.input_device)
    vision = _tower_call(lm, inputs)

    with torch.inference_mode():
        ent._prefill(lm, inputs), vision()  # warm-up
        t_pass = timed(lambda: ent._prefill(lm, inputs), 5)[0]
        t_vis = timed(vision, 5)[0]
    res = {"pairs": args.pairs, "tokens": int(inputs["attention_mask"].sum()),
           "pass_s": t_pass, "vision_s": t_vis, "lm_s": t_pass - t_vis,
           "pairs_per_s_ceiling": args.pairs / t_pass}
    cuda = args.device.startswith("cuda")
    res["align_ab"] = _align_ab(lm, vision, lambda: ent._prefill(lm, inputs))
    if cuda:
        rows = int(inputs["pixel_values"].shape[0])
        res["gemm_ab"] = _gemm_ab(rows, args.device)
    print(json.dumps({k: res[k] for k in ("align_ab", "gemm_ab") if k in res}))
    with torch.inference_mode():
        res.update(_profiled("", lambda: ent._prefill(lm, inputs), cuda))
        res.update(_profiled("vision_", vision, cuda))  # the tower alone: half the pass
    if args.ground_rows:
        res["ground"] = _ground_split(lm, args.ground_rows, args.ground_tokens, cuda)
        print(json.dumps({"ground": {k: v for k, v in res["ground"].items()
                                     if "top_" not in k}}))
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
