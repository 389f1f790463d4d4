"""``chapters`` through worker processes (not ``--in-process``): the clip's cut scan runs
while the worker loads the model, so the run waits for none of it (its ``timing.scan_s`` is
the wait, its ``scan.seconds`` the scan's own time), and the cuts are the clip's. A real CLI
process, a real CPU worker process with the tiny model, a real SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.testing.scenes import even_times, make_scene_clip

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_cut_scan_runs_while_the_worker_loads(tiny_model_dir, tmp_path) -> None:
    pytest.importorskip("av")
    clip = make_scene_clip(tmp_path / "scenes.mp4", [50, 120], even_times(180, 10.0))
    out = tmp_path / "chapters.json"
    env = {**os.environ, "CHORD_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "chord_core", "chapters", str(clip.path), "--model", "test",
         "--cpu-workers", "1", "--cuts", "scene", "--chunk-s", "4", "--chapter-s", "100",
         "--frames-per-chunk", "4", "--max-new-tokens", "128", "--json", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert [c["frame_index"] for c in doc["scan"]["cuts"]] == [50, 120]
    assert [c["first_frame"] for c in doc["chunks"]][:3] == [0, 50, 120]
    # the worker's load (seconds: torch, transformers, the model) covered the scan
    assert doc["timing"]["scan_s"] < 0.5 * doc["scan"]["seconds"], doc["timing"]
