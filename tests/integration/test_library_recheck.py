"""``search --check N``: the best hits re-checked on their frames by entailment (the tiny
model, in process): checked hits say their verdict and job, the others say they were not
checked, and a hit whose clip is gone says why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.runtime.store import Store
from chord_core.testing.library_docs import result_doc, store_result
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_best_hits_are_rechecked_and_say_so(tmp_path, tiny_model_dir):
    clip = make_video(tmp_path / "dock.mp4", duration_s=3.0, fps=10.0, size_wh=(160, 120)).path
    data = tmp_path / "data"
    with Store(data / "chord.sqlite3") as store:
        for i in range(3):
            store_result(store, f"j-{i}", result_doc(
                "ground", str(clip), query="the green square", duration_s=3.0,
                segments=[(0.5 * i, 0.5 * i + 1.0)]))
        store_result(store, "j-gone", result_doc("describe", str(tmp_path / "gone.mp4"),
                                                 text="the green square, gone"))
    # faulthandler: an abort at exit (pytorch#117762, chord_core/threads.py) prints every
    # thread's stack, so a failure here says which thread was still ending
    env = dict(os.environ, CHORD_DATA_DIR=str(data), PYTHONFAULTHANDLER="1")
    out = subprocess.run([sys.executable, "-m", "chord_core", "search", "green square",
                          "--check", "2", "--model", "test", "--limit", "10"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-8000:]
    doc = json.loads(out.stdout)
    hits = doc["hits"]
    assert len(hits) == 4 and doc["checked"] <= 2
    checked = [h["checked"] for h in hits[:2]]
    for c in checked:
        assert ("verdict" in c and c["job_id"] and c["frames"] >= 1) or "error" in c
    assert any("verdict" in c for c in checked)
    assert all(h["checked"] is None for h in hits[2:])
