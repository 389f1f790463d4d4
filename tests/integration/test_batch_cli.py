"""``python -m chord_core batch`` with two CPU workers: per-clip JSON, summary, resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _batch(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chord_core", "batch", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def test_batch_runs_all_clips_and_resumes(tmp_path, tiny_model_dir):
    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(3):
        make_video(clips / f"clip{i}.mp4", duration_s=2.0, fps=10.0, size_wh=(160, 120), seed=i)
    (clips / "notes.mp4").write_text("not a video")
    out = tmp_path / "out"
    env = {**os.environ, "CHORD_DATA_DIR": str(tmp_path / "data")}
    args = [str(clips), "--task", "describe", "--max-new-tokens", "128", "--cpu-workers", "2",
            "--model", "test", "--out", str(out), "-q"]
    first = _batch(args, env)
    assert first.returncode == 2, first.stderr  # one bad clip = bad input
    assert "Traceback" not in first.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"done": 3, "failed": 1}
    bad = [i for i in summary["items"] if i["state"] == "failed"]
    assert bad[0]["error"]["type"] == "VideoError" and "notes.mp4" in bad[0]["video"]
    for i in range(3):
        doc = json.loads((out / f"clip{i}.describe.json").read_text())
        assert doc["schema"] == "chord.result/v1" and doc["video"]["path"].endswith(f"clip{i}.mp4")
    assert set(summary["busy_s"]) == {"cpu0", "cpu1"}
    assert summary["speedup"] == pytest.approx(sum(summary["busy_s"].values())
                                               / summary["wall_s"], rel=1e-2)
    ran = {w for i in summary["items"] if i["worker"] for w in i["worker"].split("+")}
    assert ran <= {"cpu0", "cpu1"} and ran

    (out / "clip1.describe.json").unlink()
    second = _batch(args, env)
    again = json.loads((out / "summary.json").read_text())
    assert again["counts"] == {"skipped": 3, "failed": 1}, second.stderr
    assert (out / "clip1.describe.json").exists()  # rewritten from the store
    assert again["batch_id"] == summary["batch_id"]
