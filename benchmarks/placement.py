"""Placement evidence (issue 10): one engine on a multi-GPU host, and workers on the GPUs the
user named.

    python3 benchmarks/placement.py --shape 7b --clips 16 --out $OUT/placement.json

1. ``api``: the public API exactly as a user writes it — ``Engine(ModelConfig(model=ckpt))``
   with every GPU visible: where the model went, ``describe_many`` clips/min, ``analyze`` one
   clip at a time, and plain transformers (``generate``, transformers' own vision attention)
   one clip at a time on the same weights.
2. ``api-one``: the same ``describe_many`` in a process that sees one GPU
   (``CUDA_VISIBLE_DEVICES=0``); the ratio to (1) is the placement's cost.
3. ``visible``: ``CUDA_VISIBLE_DEVICES=1 python -m chord_core batch …`` and
   ``python -m chord_core batch … --gpus 1`` (both GPUs visible): NVML, sampled from here, shows
   which physical GPU the worker's memory and process land on.

Each phase runs in its own process so no memory or compile state carries over. ``--cpu`` runs
the harness on the CPU with the test model (no GPU figures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_common import describe_req, make_clips, timed

ROOT = Path(__file__).resolve().parents[1]
W1_WH = (448, 252)


def phase_api(model: str, clips: list[str], naive_clips: int, tokens: int, naive: bool) -> dict:
    from dataclasses import replace

    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig
    from chord_core.model import fastvision

    t0 = time.perf_counter()
    engine = Engine(ModelConfig(model=model))  # what a user writes: no device, no strategy
    lm = engine.load()
    out = {"load_s": time.perf_counter() - t0, "device_map": sorted(set(lm.info.device_map
                                                                         .values())),
           "placement": lm.placement, "fast_decoder": lm.decoder is not None,
           "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if lm.input_device != "cpu":
        out["warmup"] = engine.warmup()
    reqs = [describe_req(c, tokens) for c in clips]
    engine.describe_many(reqs[:2])  # warm-up
    t, results = timed(lambda: engine.describe_many(reqs))
    bad = [r for r in results if not hasattr(r, "text")]
    if bad:
        raise SystemExit(f"describe_many: {len(bad)} clips failed: {bad[:2]}")
    out["describe_many_clips_per_min"] = 60 * len(reqs) / t
    one = reqs[:naive_clips]
    t, _ = timed(lambda: [engine.analyze(r) for r in one])
    out["analyze_one_at_a_time_clips_per_min"] = 60 * len(one) / t
    if naive:
        plain = Engine(engine.model_cfg, loaded=replace(lm, decoder=None))
        with fastvision.disabled(lm.model):
            plain.analyze(one[0])  # warm-up
            t, _ = timed(lambda: [plain.analyze(r) for r in one])
        out["plain_transformers_clips_per_min"] = 60 * len(one) / t
        out["analyze_vs_plain"] = out["analyze_one_at_a_time_clips_per_min"] / \
            out["plain_transformers_clips_per_min"]
    return out


def _nvml_watch(stop: threading.Event, seen: dict) -> None:
    """Peak used memory per physical GPU and the PIDs computing on each, every 0.5 s."""
    from chord_core.gpus.nvml import Nvml

    nvml = Nvml(visible_devices=None)
    while not stop.is_set():
        for s in nvml.sample_all():
            row = seen.setdefault(s.index, {"uuid": s.uuid, "peak_used_mib": 0.0, "pids": []})
            row["peak_used_mib"] = max(row["peak_used_mib"], s.memory_used_mib or 0.0)
            row["pids"] = sorted(set(row["pids"]) | {p.pid for p in s.processes})
        stop.wait(0.5)
    nvml.close()


def phase_visible(model: str, clips: list[str], label: str, env: dict, args: list[str],
                  out_dir: Path) -> dict:
    """One ``batch`` run in a subprocess while NVML watches every physical GPU."""
    from chord_core.gpus.nvml import Nvml

    before = {s.index: s.memory_used_mib for s in Nvml(visible_devices=None).sample_all()}
    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_nvml_watch, args=(stop, seen), daemon=True)
    watcher.start()
    cmd = [sys.executable, "-m", "chord_core", "batch", *clips, "--task", "describe",
           "--model", model, "--out", str(out_dir / label), "--max-new-tokens", "128", "-q",
           *args]
    t0 = time.perf_counter()
    env = {"CHORD_DATA_DIR": str(out_dir / f"{label}-data"), **env}  # a fresh job store
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=400)
    stop.set()
    watcher.join()
    plan = [line for line in proc.stderr.splitlines() if line.startswith("plan:")]
    return {"command": " ".join(f"{k}={v}" for k, v in env.items()) + " " +
            " ".join(cmd[1:]), "rc": proc.returncode, "wall_s": time.perf_counter() - t0,
            "plan_lines": plan, "stderr_tail": proc.stderr.splitlines()[-3:],
            "used_mib_before": before, "nvml": seen}


def run_phase(name: str, args: argparse.Namespace, env: dict) -> dict:
    cmd = [sys.executable, __file__, "--phase", name, "--ckpt", args.ckpt, "--clips",
           str(args.clips), "--naive-clips", str(args.naive_clips), "--tokens",
           str(args.tokens), "--out", args.out + f".{name}"]
    if args.cpu:
        cmd.append("--cpu")
    subprocess.run(cmd, env={**os.environ, **env}, check=True, timeout=500)
    return json.loads(Path(args.out + f".{name}").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="7b", choices=("3b", "7b"))
    ap.add_argument("--ckpt", default="/tmp/chord-rand-{shape}")
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--naive-clips", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--phases", default="api,api-one,visible")
    ap.add_argument("--phase", default="", help=argparse.SUPPRESS)
    ap.add_argument("--cpu", action="store_true", help="harness smoke on the CPU, test model")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "placement.json"))
    args = ap.parse_args()
    args.ckpt = "test" if args.cpu else args.ckpt.format(shape=args.shape)
    root = Path(os.environ.get("CHORD_BENCH_DIR", "/tmp/chord-placement"))
    clips = make_clips(root / "clips", args.clips, 2.0 if args.cpu else 15.0,
                       (112, 84) if args.cpu else W1_WH)
    if args.phase:  # a child: one phase, its figures to --out
        res = phase_api(args.ckpt, clips, args.naive_clips, args.tokens,
                        naive=args.phase == "api")
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))
        return 0
    if not args.cpu and not (Path(args.ckpt) / "config.json").exists():
        from chord_core.testing.tiny_model import build_checkpoint

        build_checkpoint(Path(args.ckpt), shape=args.shape, device="cuda")
    res: dict = {"shape": "tiny" if args.cpu else args.shape, "clips": args.clips}

    def save() -> None:
        Path(args.out).write_text(json.dumps(res, indent=2, default=str))

    phases = args.phases.split(",")
    if "api" in phases:
        res["api_all_gpus"] = run_phase("api", args, {})
        save()
    if "api-one" in phases:
        res["api_one_gpu"] = run_phase("api-one", args, {"CUDA_VISIBLE_DEVICES": "0"})
        a, b = res.get("api_all_gpus"), res["api_one_gpu"]
        if a:
            res["describe_many_all_over_one"] = a["describe_many_clips_per_min"] / \
                b["describe_many_clips_per_min"]
        save()
    if "visible" in phases and not args.cpu:
        few = clips[:4]
        common = {"CHORD_COMPILE": "0"}  # where the worker lands is the point, not its speed
        res["visible_env"] = phase_visible(args.ckpt, few, "env",
                                           {**common, "CUDA_VISIBLE_DEVICES": "1"}, [], root)
        save()
        res["visible_flag"] = phase_visible(args.ckpt, few, "flag", common, ["--gpus", "1"],
                                            root)
        save()
    print(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
