"""The same ``chapters`` command started twice at once runs each chunk once (issue 40: the
second process took over the rows the live one owned and ran 29 of 33 chunks again), and
neither prints the false "lease … had lapsed" ERROR (issue 38). Two real CLI processes on
one data dir, the tiny model, a synthetic 8 s clip of 4 chunks."""

from __future__ import annotations

import json
import re
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.testing.scenes import even_times, make_scene_clip

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_same_chapters_run_started_twice_runs_each_chunk_once(tiny_model_dir,
                                                                 tmp_path) -> None:
    clip = make_scene_clip(tmp_path / "twice.mp4", [], even_times(80, 10.0))
    data = tmp_path / "data"
    env = {**os.environ, "CHORD_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}

    def cmd(n: int) -> list[str]:
        return [sys.executable, "-m", "chord_core", "chapters", str(clip.path), "--model",
                "test", "--in-process", "--cuts", "fixed", "--chunk-s", "2", "--chapter-s",
                "100", "--frames-per-chunk", "4", "--max-new-tokens", "128",
                "--json", str(tmp_path / f"ch{n}.json")]

    runs = [subprocess.Popen(cmd(n), cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for n in (1, 2)]
    outs = [(p.wait(300), p.stderr.read()) for p in runs]
    for code, err in outs:
        assert "lapsed" not in err, err[-2000:]
        # each either made the chapters, or was told the other process runs them (and did
        # nothing); a second that started after the first had finished reads them back
        assert code == 0 or (code == 1 and "already going in another process" in err), \
            err[-2000:]
    assert any(code == 0 for code, _ in outs)
    conn = sqlite3.connect(f"file:{data / 'chord.sqlite3'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT job_id, parent, state, attempts FROM jobs")]
    conn.close()
    parents = [r for r in rows if r["parent"] is None]
    children = [r for r in rows if r["parent"] is not None]
    assert len(parents) == 1 and parents[0]["state"] == "done"
    chunks = [c for c in children if re.search(r"-c\d+$", c["job_id"])]
    assert len(chunks) == 4 and {c["state"] for c in children} == {"done"}
    assert {c["attempts"] for c in children} == {1}  # no chunk (nor the summary) ran twice
    made = [json.loads((tmp_path / f"ch{n}.json").read_text()) for n in (1, 2)
            if (tmp_path / f"ch{n}.json").exists()]
    assert made and all(len(d["chunks"]) == 4 for d in made)
