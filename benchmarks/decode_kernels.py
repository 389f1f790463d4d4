"""Batch-1 decode against the bandwidth bound, kernel by kernel (issue 15: ≥ 70 % of it).

    python3 benchmarks/decode_kernels.py --shape 7b            # one GPU: every part
    python3 benchmarks/decode_kernels.py --parts gemv          # matrix-vector products only

Parts, each printed as a table and written to ``--out`` (JSON):

* ``bandwidth``: the two ceilings — a large device-to-device copy (bytes read + written, the
  figure ``speed.py`` divides by) and a large read-only reduction.
* ``gemv``: each language-model weight shape of the step at 1 and 2 rows through cuBLAS
  (``F.linear``, what the decoder runs) and through an inductor-generated reduction, as
  achieved bytes/s; weights rotate among copies so that no product is served from L2.
* ``step``: the fast decoder on random weights at the real shape, built in memory (no
  checkpoint on disk), decoding ``--tokens`` tokens after a ``--prompt``-token text prompt at
  batch 1 and 8: tokens/s against the bound ``speed.py`` uses, and the kernels of one
  captured step from the profiler (count, GPU time by kind, the heaviest kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def graph_time(fn, replays: int = 20) -> float:
    """Median seconds of one ``fn()`` replayed from a CUDA graph (after warm-up)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1000)
    return statistics.median(times)


def bandwidth(res: dict) -> None:
    import torch
    from speed import copy_bandwidth

    res["copy_GBps"] = copy_bandwidth() / 1e9
    x = torch.randn(1 << 31, dtype=torch.bfloat16, device="cuda")  # 4.3 GB
    t = graph_time(lambda: x.sum(dtype=torch.float32), 10)
    res["read_GBps"] = x.numel() * 2 / t / 1e9
    x = None  # noqa: F841 — give the 4 GB back
    print(f"copy {res['copy_GBps']:.0f} GB/s (read + write), read-only sum "
          f"{res['read_GBps']:.0f} GB/s")


def _reduction(x, w):
    """x [M, K] · w [N, K]ᵀ as one reduction with M innermost (a weight row serves every row
    of x from the cache): what inductor makes of it is a Triton matrix-vector kernel."""
    return (w[:, None, :].float() * x[None, :, :].float()).sum(-1).t().to(x.dtype)


def gemv(res: dict, shapes: dict[str, tuple[int, int]]) -> None:
    import torch
    import torch._inductor.config as ind
    import torch.nn.functional as F

    out = {}
    bw = res.get("copy_GBps")
    for name, (n, k) in shapes.items():
        size = n * k * 2
        copies = max(1, -(-(400 << 20) // size))  # ≥ 400 MB in rotation: past the L2
        ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") / k ** 0.5
              for _ in range(copies)]
        for m in (1, 2):
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            ref = (x.double() @ ws[0].double().t())
            row = {}
            variants = {"cublas": F.linear}
            with ind.patch(coordinate_descent_tuning=True):
                red = torch.compile(_reduction, dynamic=False, fullgraph=True)
                red(x, ws[0])
            variants["reduction"] = red
            for vname, fn in variants.items():
                got = fn(x, ws[0]).double()
                err = float((got - ref).norm() / ref.norm())
                t = graph_time(lambda fn=fn: [fn(x, w) for w in ws]) / copies
                row[vname] = {"us": t * 1e6, "GBps": size / t / 1e9, "rel_err": err,
                              "pct_copy": bw and 100 * size / t / 1e9 / bw}
            out[f"{name}_m{m}"] = row
            print(f"{name:8s} {n:6d}x{k:5d} m={m}: " + "  ".join(
                f"{v} {r['us']:7.1f} us {r['GBps']:5.0f} GB/s (err {r['rel_err']:.0e})"
                for v, r in row.items()))
        ws = None
    res["gemv"] = out


def build_model(shape: str):
    """Random bf16 weights at the real shape, built on the GPU in memory."""
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    from chord_core.testing import tiny_model as tm

    ids = tm._write_tokenizer(Path(tempfile.mkdtemp()))
    cfg = tm._model_config(shape, ids)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(**cfg))
    finally:
        torch.set_default_dtype(torch.float32)
    model.eval()
    model.generation_config = GenerationConfig(**tm._generation_config(ids))
    return model


def kernel_profile(dec, buf, length: int, replays: int = 5) -> dict:
    """Kernels of the captured step (the profiler sees a graph's kernels): per step count,
    GPU time, and wall between the first kernel's start and the last one's end."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    graph = dec._graphs[(buf.rows, length)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    if not kernels:
        return {"kernels": 0}
    kernels.sort(key=lambda e: e.time_range.start)
    span = (kernels[-1].time_range.end - kernels[0].time_range.start) / replays
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        by_name.setdefault(e.name, []).append(e.time_range.elapsed_us())

    def kind(name: str) -> str:
        low = name.lower()
        if low.startswith("triton"):
            return "triton"
        if any(s in low for s in ("gemv", "gemm", "nvjet", "cutlass", "sm90", "xmma")):
            return "matmul"
        return "other"

    kinds: dict[str, list[float]] = {}
    for name, ts in by_name.items():
        kinds.setdefault(kind(name), [0.0, 0.0])
        kinds[kind(name)][0] += len(ts) / replays
        kinds[kind(name)][1] += sum(ts) / replays
    busy = sum(sum(ts) for ts in by_name.values()) / replays
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:14]
    return {"kernels_per_step": len(kernels) / replays, "busy_us": busy, "span_us": span,
            "idle_us": span - busy,
            "by_kind": {k: {"count": c, "us": t} for k, (c, t) in kinds.items()},
            "top": [{"name": n[:90], "count": len(ts) / replays, "us": sum(ts) / replays,
                     "mean_us": statistics.mean(ts)} for n, ts in top]}


def step(res: dict, args) -> None:
    import torch
    from speed import decode_bytes

    from chord_core.model.fastgen import FastDecoder, length_bucket

    t0 = time.perf_counter()
    model = build_model(args.shape)
    res["build_s"] = time.perf_counter() - t0
    lm = SimpleNamespace(model=model)  # what decode_bytes reads
    bw = res.get("copy_GBps", 0) * 1e9
    gen = torch.Generator().manual_seed(1)
    out = {}
    for variant in args.variants.split(","):
        dec = FastDecoder(model, compile=True)
        dec.min_rows = int(variant)
        for batch in (1, 8):
            ids = torch.randint(200, 5000, (batch, args.prompt), generator=gen).cuda()
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            t1 = time.perf_counter()
            dec.generate(inputs, args.tokens, min_new_tokens=args.tokens)  # compile, capture
            first_s = time.perf_counter() - t1

            def run(n):
                torch.cuda.synchronize()
                t = time.perf_counter()
                dec.generate(inputs, n, min_new_tokens=n)
                torch.cuda.synchronize()
                return time.perf_counter() - t

            t_all = statistics.median(run(args.tokens) for _ in range(args.repeats))
            t_one = statistics.median(run(1) for _ in range(args.repeats))
            rate = batch * (args.tokens - 1) / (t_all - t_one)
            ctx = args.prompt + args.tokens // 2
            bound = batch * bw / decode_bytes(lm, batch, ctx) if bw else None
            length = length_bucket(args.prompt + args.tokens)
            buf = dec._buffers_for(dec.rows_for(batch), length)
            prof = kernel_profile(dec, buf, length)
            row = {"tokens_per_s": rate, "step_ms": 1000 * batch / rate,
                   "bound_tokens_per_s": bound, "pct_of_bound": bound and 100 * rate / bound,
                   "first_call_s": first_s, "rows": buf.rows, "profile": prof}
            out[f"rows{variant}_b{batch}"] = row
            print(f"rows≥{variant} batch {batch}: {rate:7.1f} tok/s ({1000 * batch / rate:.2f} ms/"
                  f"step), {row['pct_of_bound'] or 0:.1f} % of the bound; first call "
                  f"{first_s:.1f} s; {prof.get('kernels_per_step', 0):.0f} kernels/step, busy "
                  f"{prof.get('busy_us', 0):.0f} us of {prof.get('span_us', 0):.0f} us",
                  flush=True)
        dec.clear()
        dec = None
        torch.cuda.empty_cache()
    res["step"] = out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="7b", choices=("3b", "7b"))
    ap.add_argument("--parts", default="bandwidth,gemv,step")
    ap.add_argument("--variants", default="1,2",
                    help="fewest rows of a decode graph: 1 (batch 1 in its own one-row graph "
                         "and step functions, the default) or 2 (a lone request in a 2-row "
                         "graph, the earlier layout)")
    ap.add_argument("--prompt", type=int, default=2487)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                  "decode_kernels.json"))
    args = ap.parse_args()
    from chord_core.testing.tiny_model import _SHAPE_SPECS

    spec = _SHAPE_SPECS[args.shape]
    hid, inter = spec["hidden_size"], spec["intermediate_size"]
    heads, kv = spec["num_attention_heads"], spec["num_key_value_heads"]
    hd = hid // heads
    shapes = {"qkv": (hid + 2 * kv * hd, hid), "o": (hid, hid), "gate_up": (2 * inter, hid),
              "down": (hid, inter), "lm_head": (spec["vocab_size"], hid)}
    parts = set(args.parts.split(","))
    res: dict = {"shape": args.shape, "parts": sorted(parts)}

    def save() -> None:
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))

    import torch

    torch._dynamo.config.recompile_limit = 64
    res["torch"], res["device"] = torch.__version__, torch.cuda.get_device_name()
    if "bandwidth" in parts:
        bandwidth(res)
        save()
    if "gemv" in parts:
        gemv(res, shapes)
        save()
    if "step" in parts:
        step(res, args)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
