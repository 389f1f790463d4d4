"""The CLI's own runs are kept (issue 38: "the CLI's own describe/ground/entail runs store no
job, so ``search`` finds nothing from them although the README says the index covers the
app, the CLI and the service alike"). Real processes: ``describe`` in this process (no
service), then ``search`` finds the clip by its name and History's row is the job; with
``--no-store`` nothing is kept."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CHORD_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    env.pop("CHORD_SERVER", None)
    return subprocess.run([sys.executable, "-m", "chord_core", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_local_describe_is_stored_and_found_by_search(tmp_path):
    data = tmp_path / "data"
    clip = make_video(tmp_path / "dockyard-gate.mp4", duration_s=1.0, fps=5.0,
                      size_wh=(96, 72), seed=1).path
    other = make_video(tmp_path / "harbour-crane.mp4", duration_s=1.0, fps=5.0,
                       size_wh=(96, 72), seed=2).path
    run = _cli(data, "describe", str(clip), "--model", "test", "--max-new-tokens", "4",
               "--local", "-q")
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(run.stdout)
    with sqlite3.connect(data / "chord.sqlite3") as conn:
        [(job_id, state, task, name)] = conn.execute(
            "SELECT job_id, state, task, video_name FROM jobs").fetchall()
        stored = json.loads(conn.execute("SELECT result_json FROM results WHERE job_id = ?",
                                         (job_id,)).fetchone()[0])
    assert (state, task, name) == ("done", "describe", "dockyard-gate.mp4")
    # what was printed is what is kept
    assert (stored["text"], stored["created_at"]) == (doc["text"], doc["created_at"])
    found = _cli(data, "search", "dockyard")
    assert found.returncode == 0, found.stderr[-3000:]
    hits = json.loads(found.stdout)["hits"]
    assert hits and {h["source"] for h in hits} == {job_id}
    unstored = _cli(data, "describe", str(other), "--model", "test", "--max-new-tokens",
                    "4", "--local", "--no-store", "-q")
    assert unstored.returncode == 0, unstored.stderr[-3000:]
    with sqlite3.connect(data / "chord.sqlite3") as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone() == (1,)
    assert json.loads(_cli(data, "search", "harbour").stdout)["hits"] == []
