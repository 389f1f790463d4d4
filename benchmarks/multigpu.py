"""Multi-GPU benchmark: real worker processes on random-weight checkpoints at real shapes.

    python benchmarks/multigpu.py --shape 7b --clips 8 --out results.json

Measures, in one run (ratios are from the same run, same weights, same inputs):
  1. batch throughput (describe, 30 frames at 448×252, fixed output length) with one replica
     on one GPU vs one replica per GPU on all GPUs → speed-up;
  2. one 60-frame grounding job on one replica vs split over all replicas → latency ratio;
  3. greedy agreement: outputs of each replica and of a model sharded over all GPUs, against
     the one-GPU run on the same inputs;
  4. what the planner chooses for this model on these GPUs (strategy auto);
  5. GPU utilisation and memory seen by the NVML sampler while the workers run.
Warm-up jobs (one per worker) are excluded from all timings. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import describe_req, ground_req, make_clips  # noqa: E402

from chord_core.analysis.request import AnalysisRequest  # noqa: E402
from chord_core.config import ModelConfig  # noqa: E402
from chord_core.gpus.sampler import GpuSampler  # noqa: E402
from chord_core.runtime.cluster import gpu_inventory, plan_workers  # noqa: E402
from chord_core.runtime.jobs import JobSpec, JobState  # noqa: E402
from chord_core.runtime.manager import JobManager
from chord_core.runtime.parallel_config import ParallelConfig  # noqa: E402
from chord_core.runtime.workers import gpu_specs

CPU_MODE = {"on": False}


def start(groups: tuple[tuple[int, ...], ...], model: str, batch: int) -> tuple[JobManager, float]:
    t0 = time.time()
    cfg = ModelConfig(model=model, batch_size=batch)
    specs = gpu_specs(groups, cfg)
    if CPU_MODE["on"]:  # harness smoke test: one CPU worker stands in for each GPU group
        from dataclasses import replace

        specs = [replace(s, devices=(), cpu_threads=1) for s in specs]
    m = JobManager(specs)
    m.wait_ready(900)
    states = {w["worker"]: w["state"] for w in m.workers()}
    if any(s != "ready" for s in states.values()):
        raise SystemExit(f"workers failed to start: {states} {m.model_state()}")
    return m, time.time() - t0


def run_all(m: JobManager, reqs: list[AnalysisRequest]) -> tuple[float, list]:
    t0 = time.time()
    ids = [m.submit(JobSpec(r)) for r in reqs]
    finals = [m.wait(i, 1800) for i in ids]
    wall = time.time() - t0
    bad = [f.error for f in finals if f.state is not JobState.DONE]
    if bad:
        raise SystemExit(f"jobs failed: {bad[:3]}")
    return wall, [f.result for f in finals]


def warm(m: JobManager, req: AnalysisRequest, ground: AnalysisRequest) -> None:
    """Excluded from timings: one describe per worker and one split grounding job."""
    run_all(m, [req] * len(m.workers()) + [ground])


def prefix_agreement(a: str, b: str) -> float:
    """Fraction of the longer text that the two share from the start (1.0 = identical)."""
    if a == b:
        return 1.0
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n / max(1, len(a), len(b))


def agreement(ref: list[str], other: list[str]) -> dict:
    pairs = list(zip(ref, other))
    return {"exact": sum(a == b for a, b in pairs) / len(pairs),
            "prefix_mean": statistics.mean(prefix_agreement(a, b) for a, b in pairs),
            "n": len(pairs), "empty": sum(not a for a, _ in pairs)}


def gpu_summary(sampler: GpuSampler) -> dict:
    out = {}
    for idx, samples in sampler.history().items():
        util = [s.utilization_pct for s in samples if s.utilization_pct is not None]
        mem = [s.memory_used_mib for s in samples if s.memory_used_mib is not None]
        out[str(idx)] = {"name": samples[-1].name if samples else "",
                         "util_median": statistics.median(util) if util else None,
                         "util_max": max(util) if util else None,
                         "mem_max_mib": max(mem) if mem else None,
                         "memory_total_mib": samples[-1].memory_total_mib if samples else None,
                         "samples": len(samples)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="7b", choices=("tiny", "3b", "7b"))
    ap.add_argument("--ckpt", default="/tmp/chord-rand-{shape}")
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ground-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--cpu-gpus", type=int, default=0,
                    help="smoke-test the harness without GPUs: N CPU workers play N GPUs")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "multigpu.json"))
    args = ap.parse_args()
    from chord_core.testing.tiny_model import build_checkpoint

    ckpt = Path(args.ckpt.format(shape=args.shape))
    t = time.time()
    CPU_MODE["on"] = args.cpu_gpus > 0
    if not (ckpt / "config.json").exists():
        build_checkpoint(ckpt, shape=args.shape, device="cpu" if CPU_MODE["on"] else "cuda")
    res: dict = {"shape": args.shape, "build_s": time.time() - t}
    inv, reason = gpu_inventory()
    if CPU_MODE["on"]:
        from chord_core.gpus.devices import GpuInfo

        inv = [GpuInfo(i, "cpu-stand-in", 8 << 30, 8 << 30) for i in range(args.cpu_gpus)]
    n = len(inv)
    res["gpus"] = [g.__dict__ for g in inv]
    if n == 0:
        raise SystemExit(f"no GPU: {reason}")
    wp = plan_workers(ModelConfig(model=str(ckpt)), ParallelConfig(strategy="auto"),
                      inventory=inv)
    res["planner_auto"] = wp.to_dict()
    clips = make_clips(Path("/tmp/chord-bench-clips"), args.clips, 15.0, (448, 252))
    long_clip = make_clips(Path("/tmp/chord-bench-long"), 1, 30.0, (448, 252))[0]
    sampler = GpuSampler(interval_s=0.5, history_s=3600)
    sampler.start()
    reqs = [describe_req(c, args.tokens) for c in clips]

    warm_ground = ground_req(reqs[0].video_path, args.ground_tokens)
    one, res["start_1gpu_s"] = start(((0,),), str(ckpt), args.batch)
    warm(one, reqs[0], warm_ground)
    res["describe_1gpu_wall_s"], r1 = run_all(one, reqs)
    res["ground60_1gpu_s"], g1 = run_all(one, [ground_req(long_clip, args.ground_tokens)])
    _, again = run_all(one, reqs[:2])
    one.shutdown()
    ref = [r.text for r in r1]
    ref_ground = list(g1[0].raw_outputs)
    res["agree_1gpu_rerun"] = agreement(ref[:2], [r.text for r in again])
    res["frames_grounded"] = g1[0].sampling.num_frames
    res["ground60_1gpu_timing"] = g1[0].timing.to_dict()

    if n >= 2:
        groups = tuple((i,) for i in range(n))
        rep, res["start_replicas_s"] = start(groups, str(ckpt), args.batch)
        warm(rep, reqs[0], warm_ground)
        res["describe_replicas_wall_s"], rn = run_all(rep, reqs)
        res["ground60_split_s"], gn = run_all(rep, [ground_req(long_clip, args.ground_tokens)])
        res["replica_workers"] = rep.workers()
        res["ground60_split_timing"] = gn[0].timing.to_dict()
        rep.shutdown()
        res["agree_replicas"] = agreement(ref, [r.text for r in rn])
        res["agree_split_ground"] = agreement(ref_ground, list(gn[0].raw_outputs))
        res["throughput_speedup"] = res["describe_1gpu_wall_s"] / res["describe_replicas_wall_s"]
        res["ground_split_ratio"] = res["ground60_split_s"] / res["ground60_1gpu_s"]

        shard, res["start_shard_s"] = start((tuple(range(n)),), str(ckpt), args.batch)
        warm(shard, reqs[0], warm_ground)
        res["describe_shard_wall_s"], rs = run_all(shard, reqs[:2])
        res["shard_device_map_sample"] = dict(list(rs[0].model.device_map.items())[:6])
        res["shard_devices"] = sorted(set(rs[0].model.device_map.values()))
        shard.shutdown()
        res["agree_shard"] = agreement(ref[:2], [r.text for r in rs])
    res["clips_per_min_1gpu"] = 60 * len(reqs) / res["describe_1gpu_wall_s"]
    if "describe_replicas_wall_s" in res:
        res["clips_per_min_replicas"] = 60 * len(reqs) / res["describe_replicas_wall_s"]
    res["gpu_sampler"] = gpu_summary(sampler)
    sampler.stop()
    Path(args.out).write_text(json.dumps(res, indent=2, default=str))
    for k, v in res.items():
        if k.startswith("agree") or k.endswith("_timing"):
            print(f"{k:28} {v}")
        elif not isinstance(v, (dict, list)):
            print(f"{k:28} {v:.3f}" if isinstance(v, float) else f"{k:28} {v}")
    print(json.dumps(res["gpu_sampler"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
