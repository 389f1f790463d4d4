"""``python -m chord_core review`` and ``ask`` as a user runs them (real subprocesses over a
real store): review lists, marks and puts items into an exported case; ask searches the
library, checks the best hits by entailment with the tiny model on CPU and cites clip@time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.runtime.store import Store
from chord_core.testing.library_docs import result_doc, store_result
from chord_core.testing.videos import make_video

ROOT = Path(__file__).resolve().parents[2]


def _run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chord_core", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_review_lists_marks_and_exports_a_case(tmp_path):
    from chord_core.library.alerts import store_alert
    from chord_core.library.index import LibraryIndex

    media = tmp_path / "media"
    media.mkdir()
    clip = make_video(media / "gate.mp4", duration_s=3.0, fps=10.0, size_wh=(96, 72)).path
    data = tmp_path / "data"
    with LibraryIndex(data / "chord.sqlite3") as index:
        store_alert(index, "w-1", {"clip_key": "k", "statement": "a person at the gate",
                                   "path": str(clip), "job_id": "j1"},
                    {"start_s": 1.0, "end_s": 2.0, "probability": 0.9, "evidence": []})
    env = dict(os.environ, CHORD_DATA_DIR=str(data), CHORD_MEDIA_ROOTS=str(media))
    listed = _run(env, "review", "--unreviewed")
    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)["items"]
    assert (item["clip"], item["start_s"], item["reviewed"]) == ("gate.mp4", 1.0, False)
    marked = _run(env, "review", "--mark", item["id"], "--by", "ana")
    assert marked.returncode == 0 and json.loads(marked.stdout)["unreviewed"] == 0
    bad = _run(env, "review", "--mark", "x; rm -rf /")
    assert bad.returncode == 2 and "not a review item id" in bad.stderr
    assert "Traceback" not in bad.stderr
    out = tmp_path / "cases"
    case = _run(env, "review", "--case", "gate", item["id"], "--export", str(out))
    assert case.returncode == 0, case.stderr
    doc = json.loads((out / "gate" / "case.json").read_text())
    assert [m["cut"] for m in doc["moments"]] == ["remuxed"]
    assert (out / "gate" / doc["moments"][0]["clip_file"]).stat().st_size > 0
    with Store(data / "chord.sqlite3") as store:  # a done grounding job over the same clip
        store_result(store, "g1", result_doc("ground", str(clip), query="the square",
                                             duration_s=3.0, segments=[(0.5, 1.5)]))
    span = _run(env, "review", "--case", "gate", "--job", "g1", "--start", "0.5", "--end",
                "1.5", "--export", str(out))
    assert span.returncode == 0, span.stderr
    doc = json.loads((out / "gate" / "case.json").read_text())
    assert [(m["origin"], m["job_id"], m["error"]) for m in doc["moments"]] == [
        ("review", "j1", None), ("result", "g1", None)]
    past = _run(env, "review", "--case", "gate", "--job", "g1", "--start", "2", "--end", "9")
    assert past.returncode == 2 and "not within the clip" in past.stderr, past.stderr
    none = _run(env, "review", "--case", "gate", "--job", "g1", "--start", "1")
    assert none.returncode == 2 and "--end" in none.stderr


@pytest.mark.slow
def test_ask_answers_with_checked_citations_on_cpu(tmp_path, tiny_model_dir):
    clip = make_video(tmp_path / "dock.mp4", duration_s=3.0, fps=10.0, size_wh=(160, 120)).path
    data = tmp_path / "data"
    with Store(data / "chord.sqlite3") as store:
        for i in range(3):
            store_result(store, f"j-{i}", result_doc(
                "ground", str(clip), query="the forklift", duration_s=3.0,
                segments=[(1.0 * i, 1.0 * i + 0.8)]))
    env = dict(os.environ, CHORD_DATA_DIR=str(data))
    out = _run(env, "ask", "where is the forklift", "--check", "2", "--model", "test",
               "--threshold", "0.001")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["schema"] == "chord.ask/v1" and doc["candidates"] == 3
    assert doc["checked"] == 2 and len(doc["claims"]) == 2 and len(doc["unchecked"]) == 1
    for claim in doc["claims"]:
        assert re.fullmatch(r"dock\.mp4@0:0[0-3]", claim["citation"])
        assert claim["start_s"] - 0.11 <= claim["at_s"] <= max(claim["end_s"],
                                                               claim["start_s"] + 1.0) + 0.11
        assert 0.001 <= claim["p_entailment"] <= 1.0 and claim["supported"]
        assert claim["citation"] in doc["answer"]
    assert doc["answer"].startswith("2 of 2 checked moment(s)")
    empty = _run(env, "ask", "   ", "--model", "test")
    assert empty.returncode == 2 and "question is empty" in empty.stderr
