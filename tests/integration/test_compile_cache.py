"""The decode step's compile cache, as a restarted worker meets it: inductor's caches live
under the Chord cache dir (``decode_step.compile_cache_env``, set before torch is imported),
a second process compiling the same step on the same shapes reads it (hits, no misses: what
``/health``'s ``compile_cache`` then shows), and a model of another dtype or width, or another
torch build, misses instead of reusing a wrong entry. Each run is a fresh process compiling
the real ``_head_choose`` step on the CPU (inductor's C++ back end)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, os, sys
from chord_core.model.decode_step import compile_cache_env

compile_cache_env()  # what the worker's set-up and the model load do before torch
import torch
from chord_core.model import decode_step as step

dtype, width, build = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if build != "this":  # another torch build: inductor's key holds torch's source hash
    import torch._inductor.codecache as cc
    mine = cc.torch_key()
    cc.torch_key = lambda: mine + build.encode()
torch.manual_seed(0)
dt = getattr(torch, dtype)
head = torch.nn.Linear(width, 64, bias=False).to(dt)
one_row, _ = step.functions(True)
with torch.inference_mode():
    one_row.head(head, torch.randn(1, 1, width, dtype=dt), torch.zeros(1, 64, dtype=torch.bool),
                 torch.tensor(0), torch.tensor(1), torch.zeros(1, dtype=torch.bool),
                 torch.tensor([0, 0]), 1.0, 0)
print(json.dumps({**step.compile_stats(), "dir": os.environ["TORCHINDUCTOR_CACHE_DIR"]}))
"""


def _compile(cache: Path, dtype: str = "float32", width: int = 16, build: str = "this"
             ) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    env["CHORD_CACHE_DIR"] = str(cache)
    out = subprocess.run([sys.executable, "-c", _PROBE, dtype, str(width), build], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # five processes each compile a graph on the CPU: ~20 s each
def test_a_restart_reuses_the_compiled_step_and_another_shape_dtype_or_torch_does_not(
        tmp_path):
    import torch._inductor.codecache as cc

    if not hasattr(cc, "torch_key"):
        pytest.skip("this torch has no codecache.torch_key to stand in for another build")
    cache = tmp_path / "chord-cache"
    cold = _compile(cache)
    assert cold["dir"] == str(cache / "compile" / "inductor")
    assert cold["fx_cache_misses"] >= 1 and cold["fx_cache_hits"] == 0, cold
    assert any((cache / "compile" / "inductor").iterdir())
    warm = _compile(cache)  # a restarted worker: the same step, shapes, dtype and torch
    assert warm["fx_cache_hits"] >= 1 and warm["fx_cache_misses"] == 0, warm
    assert warm["aot_cache_misses"] == 0, warm
    for other in ({"dtype": "bfloat16"}, {"width": 32}, {"build": "another torch"}):
        got = _compile(cache, **other)
        assert got["fx_cache_misses"] >= 1 and got["fx_cache_hits"] == 0, (other, got)
