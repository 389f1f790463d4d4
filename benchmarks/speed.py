"""Speed harness (issue 5): each workload against the naive path, in the same run.

    python3 benchmarks/speed.py --shape 7b                 # one GPU (cuda:0), prints a table
    python3 benchmarks/speed.py --shape 7b --workloads w2x # W1/W2 through workers, 1 vs 2 GPUs
    python3 benchmarks/speed.py --cpu                      # test model on the CPU (seconds)

"naive" is what Qwen's examples do: one request at a time through transformers' ``generate``
(``decoder="generate"``). "ours" is the default engine path: the fast decoder (static cache,
CUDA-graph decode, no syncs in the loop), clips batched, frames read ahead on CPU threads.
Both use the same loaded weights (random, at the real 3B/7B shapes; built on the GPU), the
same inputs and fixed output lengths (EOS ignored via ``min_new_tokens``). Warm-up runs are
excluded; timed figures are medians of ``--repeats``. Writes JSON to ``--out``.

Workloads: ``decode`` (tokens/s at batch 1 and 8 vs the memory-bandwidth bound measured in the
same run), ``agree`` (greedy tokens: ours vs naive, exact and teacher-forced), ``w1`` (describe
many 30-frame 448×252 clips, clips/min), ``w2`` (one 60-frame grounding job, latency), ``w3``
(30 frames at 1036×588, ≈ 11.7k visual tokens), ``w2x`` (W1 and W2 through worker processes on
1 and then 2 GPUs), ``cold`` (worker start → ready, twice). W4 (CPU sampling) is
``benchmarks/sampling.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import multigpu  # noqa: E402 — this folder: the scripts share helpers
from bench_common import clip_inputs, describe_req, ground_req, make_clips, timed  # noqa: E402

from chord_core.analysis.engine import Engine  # noqa: E402
from chord_core.config import ModelConfig, SamplingConfig  # noqa: E402

W1_WH, W3_WH = (448, 252), (1036, 588)


def torch_gpus() -> int:
    import torch

    return torch.cuda.device_count()


# -- decode: tokens/s against the bandwidth bound ----------------------------------------------
def copy_bandwidth() -> float:
    """Bytes/s of a large device-to-device copy (read + write), the memory roofline."""
    import torch

    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        y.copy_(x)
    end.record()
    end.synchronize()
    return 2 * x.numel() * 20 / (start.elapsed_time(end) / 1000)


def decode_bytes(lm, rows: int, context: int) -> int:
    """Bytes one decode step must read: language-model weights (not the vision tower, not the
    embedding table: one row each) plus every row's KV cache up to ``context``."""
    model = lm.model
    weights = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                  if "visual" not in n and "embed_tokens" not in n)
    cfg = model.config.get_text_config()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 2
    return weights + rows * context * kv


@contextmanager
def naive(lm):
    """Context for naive runs: transformers' own vision attention, patch embedding and MLP
    width on the shared weights."""
    from chord_core.model import fastvision, mlp_align, patch_embed

    with fastvision.disabled(lm.model), patch_embed.disabled(lm.model), \
            mlp_align.disabled(lm.model):
        yield


def bench_decode(variants: dict, clips, tokens, repeats, res, cpu) -> None:
    from contextlib import nullcontext

    from chord_core.model.loading import _generate

    out = {}
    bw = None if cpu else copy_bandwidth()
    res["copy_bandwidth_GBps"] = bw and bw / 1e9
    first = next(iter(variants.values()))
    for rows in (1, 8):
        inputs = clip_inputs(first, (clips * 8)[:rows], SamplingConfig(fps=2.0))
        ctx = int(inputs["input_ids"].shape[1]) + tokens // 2
        for name, lm in variants.items():
            with naive(lm) if name == "naive" else nullcontext():
                _generate(lm, inputs, tokens, tokens, None)  # warm-up (and graph capture)
                t_all, _ = timed(lambda: _generate(lm, inputs, tokens, tokens, None), repeats)
                t_one, _ = timed(lambda: _generate(lm, inputs, 1, 1, None), repeats)
            rate = rows * (tokens - 1) / max(1e-9, t_all - t_one)
            row = {"tokens_per_s": rate, "step_ms": 1000 * rows / rate, "prefill_s": t_one,
                   "total_s": t_all, "prompt_tokens": int(inputs["input_ids"].shape[1])}
            if bw:
                bound = rows * bw / decode_bytes(lm, rows, ctx)
                row.update(bound_tokens_per_s=bound, pct_of_bound=100 * rate / bound)
            out[f"{name}_b{rows}"] = row
            if name != "naive":
                out[f"speedup_{name}_b{rows}"] = row["tokens_per_s"] / \
                    out[f"naive_b{rows}"]["tokens_per_s"]
    res["decode"] = out


# -- agreement: greedy tokens of ours vs naive --------------------------------------------------
def bench_agree(lm_fast, lm_naive, clips, tokens, res) -> None:
    import torch

    from chord_core.model.loading import _generate

    inputs = clip_inputs(lm_fast, clips[:4], SamplingConfig(fps=2.0))
    with naive(lm_naive), torch.inference_mode():
        gen = lm_naive.model.generate(**inputs, max_new_tokens=tokens, min_new_tokens=tokens,
                                      do_sample=False, output_scores=True,
                                      return_dict_in_generate=True)
        naive2, _ = _generate(lm_naive, inputs, tokens, tokens, None)
    ref_ids = gen.sequences[:, inputs["input_ids"].shape[1]:].cpu()
    scores = torch.stack([s.float() for s in gen.scores], 1).cpu()  # [B, T, V] processed
    top2 = scores.topk(2, dim=-1).values
    finite = torch.isfinite(scores)  # min_new_tokens sets the end tokens to -inf
    vals = scores.masked_fill(~finite, 0.0)
    mean = vals.sum(-1) / finite.sum(-1)
    std = (((vals - mean[..., None]) * finite) ** 2).sum(-1).div(finite.sum(-1)).sqrt()
    gap = (top2[..., 0] - top2[..., 1]) / std  # top-2 margin in units of the logits' std
    ours, _ = _generate(lm_fast, inputs, tokens, tokens, None)
    forced = lm_fast.decoder.generate(inputs, tokens, min_new_tokens=tokens,
                                      force_tokens=ref_ids.to(lm_fast.input_device)).cpu()
    flips = forced != ref_ids

    def prefix(a, b):
        diff = (a != b).nonzero()
        return int(diff[0]) if len(diff) else len(a)

    res["agree"] = {
        "rows": len(ref_ids), "tokens": tokens,
        "ours_vs_naive_exact_rows": int(sum(bool((a == b).all()) for a, b in zip(ours, ref_ids))),
        "ours_vs_naive_prefix_mean": statistics.mean(prefix(a, b) for a, b in zip(ours, ref_ids)),
        "naive_rerun_exact_rows": int(sum(bool((a == b).all()) for a, b in zip(naive2, ref_ids))),
        "teacher_forced_top1_agreement": float((forced == ref_ids).float().mean()),
        "naive_top2_gap_median_std": float(gap.median()),
        "naive_top2_gap_at_flips_max_std": float(gap[flips].max()) if flips.any() else None,
        "naive_top2_gap_at_flips_median_std": float(gap[flips].median()) if flips.any()
        else None,
    }


# -- W1 / W3: many clips described ---------------------------------------------------------------
def bench_describe(e_fast, e_naive, clips, naive_clips, tokens, sampling, repeats, key, res,
                   batches=()):
    reqs = [describe_req(c, tokens, sampling) for c in clips]
    with naive(e_naive.load()):
        e_naive.analyze(reqs[0])
        t_naive, outs = timed(lambda: [e_naive.analyze(r) for r in reqs[:naive_clips]])
    # warm-up with every clip: the default batch is the memory planner's (up to 32 clips on
    # a GPU), so a smaller warm-up would leave its decode graph to be captured in the timing
    e_fast.describe_many(reqs)
    t_ours, results = timed(lambda: e_fast.describe_many(reqs), repeats)
    for b in batches:  # larger decode batches: describe_many's batch_size
        e_fast.describe_many(reqs[:b], batch_size=b)  # warm-up (its graph captured)
        t_b, _ = timed(lambda: e_fast.describe_many(reqs, batch_size=b), repeats)
        res.setdefault(key + "_batches", {})[f"b{b}_clips_per_min"] = 60 * len(reqs) / t_b
    bad = [r for r in results if not hasattr(r, "text")]
    if bad:
        raise SystemExit(f"{key}: {len(bad)} clips failed: {bad[:2]}")
    naive_cpm, ours_cpm = 60 * naive_clips / t_naive, 60 * len(reqs) / t_ours
    res[key] = {"clips_naive": naive_clips, "clips_ours": len(reqs),
                "visual_tokens": results[0].sampling.visual_tokens,
                "frames": results[0].sampling.num_frames,
                "naive_clips_per_min": naive_cpm, "ours_clips_per_min": ours_cpm,
                "ratio": ours_cpm / naive_cpm, "naive_s_per_clip": t_naive / naive_clips,
                "ours_s_per_clip": t_ours / len(reqs)}


# -- W2: one 60-frame grounding job ---------------------------------------------------------------
def bench_ground(e_fast, e_naive, clip, tokens, repeats, res, batches=(8, 16, 32)) -> None:
    e_fast.analyze(ground_req(clip, tokens, batches[0]))  # warm-up
    out = {}
    with naive(e_naive.load()):
        t_naive, r = timed(lambda: e_naive.analyze(ground_req(clip, tokens, 1)))
    out["frames"] = r.sampling.num_frames
    out["naive_s"] = t_naive
    for b in batches:
        t, _ = timed(lambda: e_fast.analyze(ground_req(clip, tokens, b)), repeats)
        out[f"ours_b{b}_s"] = t
    best = min(batches, key=lambda b: out[f"ours_b{b}_s"])
    out["best_batch"], out["ratio"] = best, t_naive / out[f"ours_b{best}_s"]
    res["w2"] = out


# -- W1 / W2 through worker processes, 1 GPU then 2 GPUs ------------------------------------------
def bench_workers(model: str, clips: list[str], long_clip: str, tokens: int, ground_tokens: int,
                  batch: int, repeats: int, gpus: int, cpu: bool, res: dict) -> None:
    """The product path (JobManager → workers → Engine): W1 throughput and W2 latency on one
    replica and on one replica per GPU; warm-up jobs excluded; W2 is the median of repeats."""
    multigpu.CPU_MODE["on"] = cpu
    out: dict = {}
    w1 = [describe_req(c, tokens, SamplingConfig(fps=2.0)) for c in clips]
    for n in (1, gpus):
        groups = tuple((i,) for i in range(n))
        m, out[f"start_{n}gpu_s"] = multigpu.start(groups, model, batch)
        try:
            multigpu.warm(m, w1[0], ground_req(long_clip, ground_tokens))
            wall, results = multigpu.run_all(m, w1)
            out[f"w1_{n}gpu_clips_per_min"] = 60 * len(w1) / wall
            walls = [multigpu.run_all(m, [ground_req(long_clip, ground_tokens)])[0]
                     for _ in range(repeats)]
            out[f"w2_{n}gpu_s"] = statistics.median(walls)
            out[f"workers_{n}gpu"] = [{k: w[k] for k in ("worker", "devices", "busy_s",
                                                         "tasks_done")} for w in m.workers()]
        finally:
            m.shutdown()
        if n == gpus:
            break
    if gpus > 1:
        out["w1_speedup"] = out[f"w1_{gpus}gpu_clips_per_min"] / out["w1_1gpu_clips_per_min"]
        out["w2_ratio"] = out[f"w2_{gpus}gpu_s"] / out["w2_1gpu_s"]
    res["workers"] = out


# -- cold start: worker process start → ready, with a fresh and a reused compile cache -----------
def bench_cold(model: str, cpu: bool, res: dict) -> None:
    import tempfile

    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.workers import gpu_specs

    cache = tempfile.mkdtemp(prefix="chord-cold-")
    names = ("CHORD_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    saved = {k: os.environ.get(k) for k in names}
    # workers inherit these: a fresh compile cache (this process's own compile set the
    # inductor/triton variables to ITS cache, which would make the first start warm)
    os.environ["CHORD_CACHE_DIR"] = cache
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "compile", "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "compile", "triton")
    out = {}
    try:
        for name in ("fresh_cache_s", "warm_cache_s"):
            specs = gpu_specs(((0,),), ModelConfig(model=model))
            if cpu:
                specs = [replace(s, devices=(), cpu_threads=1) for s in specs]
            t0 = time.perf_counter()
            m = JobManager(specs)
            m.wait_ready(600)
            out[name] = time.perf_counter() - t0
            out[name.replace("_s", "_state")] = [w["state"] for w in m.workers()]
            out[name.replace("_s", "_startup")] = [w["startup"] for w in m.workers()]
            m.shutdown()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    res["cold"] = out


IN_PROCESS = {"decode", "agree", "w1", "w2", "w3"}  # workloads on a model loaded here


def load_in_process(model: str, device: str, res: dict) -> tuple:
    """The model loaded in this process and warmed up: (fast lm, naive lm, engines)."""
    from chord_core.model.loading import load_model

    t0 = time.perf_counter()
    cfg = ModelConfig(model=model, device=device)
    lm_fast = load_model(cfg)
    res["load_s"] = time.perf_counter() - t0
    lm_naive = replace(lm_fast, decoder=None)
    e_fast, e_naive = Engine(cfg, loaded=lm_fast), Engine(cfg, loaded=lm_naive)
    res["warmup"] = e_fast.warmup()
    res["decoder_stats_after_warmup"] = dict(lm_fast.decoder.stats) if lm_fast.decoder else None
    return lm_fast, lm_naive, e_fast, e_naive


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="7b", choices=("tiny", "3b", "7b"))
    ap.add_argument("--ckpt", default="/tmp/chord-rand-{shape}")
    ap.add_argument("--workloads", default="decode,agree,w1,w2,w3")
    ap.add_argument("--clips", type=int, default=32, help="W1 clips for our path")
    ap.add_argument("--naive-clips", type=int, default=6)
    ap.add_argument("--describe-batches", default="",
                    help="W1 also with describe_many(batch_size=B) for each B, e.g. 16,24")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ground-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--compare-compile", action="store_true",
                    help="decode: also time the fast decoder with the other compile setting")
    ap.add_argument("--worker-clips", type=int, default=0,
                    help="w2x: describe jobs per run (default 4 batches per GPU)")
    ap.add_argument("--compare-rows", action="store_true",
                    help="decode: also time batch 1 in a 2-row graph (the earlier layout)")
    ap.add_argument("--batch", type=int, default=16,
                    help="worker batch size (describe clips / grounding frames per call)")
    ap.add_argument("--cpu", action="store_true", help="test model on the CPU (harness smoke)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "speed.json"))
    args = ap.parse_args()
    from chord_core.testing.tiny_model import build_checkpoint

    work = set(args.workloads.split(","))
    if args.cpu:
        model, device = "test", "cpu"
        args.clips, args.naive_clips, args.tokens, args.ground_tokens = 3, 2, 128, 4
        args.repeats, w1_s, w2_s = 1, 2.0, 3.0
    else:
        ckpt = Path(args.ckpt.format(shape=args.shape))
        if not (ckpt / "config.json").exists():
            build_checkpoint(ckpt, shape=args.shape, device="cuda")
        model, device, w1_s, w2_s = str(ckpt), "cuda:0", 15.0, 30.0
    res: dict = {"shape": "tiny" if args.cpu else args.shape, "workloads": sorted(work)}
    root = Path(os.environ.get("CHORD_BENCH_DIR", "/tmp/chord-speed"))
    clips = make_clips(root / "w1", max(args.clips, 8) if not args.cpu else args.clips,
                       w1_s, W1_WH if not args.cpu else (112, 84))
    w1_sampling = SamplingConfig(fps=2.0)

    def save() -> None:  # after every workload: a run cut short still reports what it did
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))

    if "cold" in work:  # first, before this process has compiled anything
        bench_cold(model, args.cpu, res)
        save()
    if work & IN_PROCESS:
        lm_fast, lm_naive, e_fast, e_naive = load_in_process(model, device, res)
        save()
    if "decode" in work:
        variants = {"naive": lm_naive, "ours": lm_fast}
        if args.compare_compile and lm_fast.decoder is not None:  # the other setting too
            from chord_core.model.fastgen import FastDecoder

            other = not lm_fast.decoder.compiled
            dec = FastDecoder(lm_fast.model, pad_token_id=lm_fast.decoder.pad, compile=other)
            t0 = time.perf_counter()
            dec.prepare((1, 8), 4096)
            res[f"prepare_compile_{other}_s"] = time.perf_counter() - t0
            variants["ours_compile" if other else "ours_nocompile"] = replace(lm_fast,
                                                                              decoder=dec)
        if args.compare_rows and lm_fast.decoder is not None:
            from chord_core.model.fastgen import FastDecoder

            dec = FastDecoder(lm_fast.model, pad_token_id=lm_fast.decoder.pad,
                              compile=lm_fast.decoder.compiled)
            dec.min_rows = 2  # a lone request in a 2-row graph: the layout before
            t0 = time.perf_counter()
            dec.prepare((1,), 4096)
            res["prepare_rows2_s"] = time.perf_counter() - t0
            variants["ours_rows2"] = replace(lm_fast, decoder=dec)
        res["ours_compiled"] = bool(lm_fast.decoder and lm_fast.decoder.compiled)
        bench_decode(variants, clips, args.tokens, args.repeats, res, args.cpu)
        save()
    if "agree" in work and lm_fast.decoder is not None:
        bench_agree(lm_fast, lm_naive, clips, args.tokens, res)
        save()
    if "w1" in work:
        bench_describe(e_fast, e_naive, clips[:args.clips], args.naive_clips, args.tokens,
                       w1_sampling, args.repeats, "w1", res,
                       [int(b) for b in args.describe_batches.split(",") if b])
        save()
    long_clip = make_clips(root / "w2", 1, w2_s, W1_WH if not args.cpu else (112, 84))[0] \
        if work & {"w2", "w2x"} else None
    if "w2" in work:
        bench_ground(e_fast, e_naive, long_clip, args.ground_tokens, args.repeats, res,
                     (2,) if args.cpu else (8, 16, 32))
        save()
    if "w3" in work:
        wh = W3_WH if not args.cpu else (168, 112)
        hi = make_clips(root / "w3", 4 if not args.cpu else 2, w1_s, wh)
        sampling = SamplingConfig(fps=2.0, max_pixels=wh[0] * wh[1],
                                  min_pixels=min(wh[0] * wh[1], SamplingConfig().min_pixels))
        bench_describe(e_fast, e_naive, hi, 2 if not args.cpu else 1, args.tokens, sampling,
                       args.repeats, "w3", res)
        save()
    if work & IN_PROCESS:
        res["decoder_stats"] = dict(lm_fast.decoder.stats) if lm_fast.decoder else None
    if "w2x" in work:  # the workers load their own copies: give this one back first
        from chord_core.model.loading import release_memory

        lm_fast = lm_naive = e_fast = e_naive = variants = None  # noqa: F841
        release_memory()
        gpus = 2 if args.cpu else torch_gpus()
        # throughput in steady state: several batches per GPU (files repeat: each job
        # still probes, reads and decodes its clip)
        n = args.worker_clips or (len(clips) if args.cpu else 4 * args.batch * gpus)
        bench_workers(model, (clips * n)[:n], long_clip, args.tokens, args.ground_tokens,
                      args.batch, args.repeats, gpus, args.cpu, res)
        save()
    Path(args.out).write_text(json.dumps(res, indent=2, default=str))
    print(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
