"""The GPU benchmark scripts, run in their CPU smoke modes so they cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_multigpu_harness_cpu_mode(tmp_path, tiny_model_dir):
    proc = _run(["benchmarks/multigpu.py", "--shape", "tiny", "--cpu-gpus", "2", "--clips", "2",
                 "--ground-tokens", "4", "--ckpt", str(tmp_path / "ckpt")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "multigpu.json").read_text())
    assert res["frames_grounded"] == 60
    for key in ("throughput_speedup", "ground_split_ratio"):
        assert res[key] > 0
    for key in ("agree_replicas", "agree_shard", "agree_split_ground", "agree_1gpu_rerun"):
        assert res[key]["exact"] == 1.0, key  # CPU float32 is deterministic
    assert len(res["planner_auto"]["workers"]) == 2


def test_agreement_check_cpu_mode(tmp_path, tiny_model_dir):
    proc = _run(["benchmarks/agreement.py", "--cpu", "--tokens", "8"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "agreement.json").read_text())
    assert res["first_rerun"]["max_abs_logit_diff"] == 0.0
    assert res["first_rerun"]["shared_token_prefix"] == 8
