"""`describe` / `ground` switch to long-video mode by themselves past the threshold, say so,
and leave a short clip exactly as before. Real CLI (``main``), real SQLite store, the tiny
random-weight model (its words mean nothing: schemas, times and frames are checked)."""

from __future__ import annotations

import json

import pytest

from chord_core.__main__ import main
from chord_core.testing.scenes import even_times, make_scene_clip

pytest.importorskip("av")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    d = tmp_path_factory.mktemp("lv-auto")
    return make_scene_clip(d / "eight.mp4", [40], even_times(80, 10.0), size_wh=(96, 64))


def _run(argv, capsys):
    code = main(argv)
    return code, capsys.readouterr().err


def test_describe_past_the_threshold_makes_chapters_and_says_so(clip, tmp_path, capsys,
                                                                tiny_model_dir) -> None:
    out = tmp_path / "d.json"
    code, err = _run(["describe", str(clip.path), "--model", "test", "--long-after", "3",
                      "--prompt", "what happens", "-q", "--json", str(out)], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema"] == "chord.chapters/v1"
    assert doc["chapters"][0]["start_s"] == 0.0
    assert doc["chapters"][-1]["end_s"] == pytest.approx(clip.times_s[-1] + 0.1, abs=0.11)
    assert "past the long-video threshold of 3 s" in err and "--long-after inf" in err
    assert "Traceback" not in err


def test_ground_past_the_threshold_grounds_the_whole_clip_in_chunks(clip, tmp_path, capsys,
                                                                    tiny_model_dir) -> None:
    out = tmp_path / "g.json"
    code, err = _run(["ground", str(clip.path), "the yellow square", "--model", "test",
                      "--long-after", "3", "--fps", "2", "-q", "--json", str(out)], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema"] == "chord.result/v1" and doc["task"] == "ground"
    times = doc["sampling"]["timestamps_s"]
    assert times[0] == 0.0 and times[-1] >= 7.0 and len(times) >= 15  # 2 fps over 8 s
    assert "grounding over the whole clip in chunks at 2 fps" in err


def test_a_short_clip_is_analysed_as_before(clip, tmp_path, capsys, tiny_model_dir) -> None:
    out = tmp_path / "s.json"
    code, err = _run(["describe", str(clip.path), "--model", "test", "--max-frames", "4",
                      "--max-new-tokens", "128", "-q", "--json", str(out)], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["schema"] == "chord.result/v1" and doc["task"] == "describe"
    assert "long-video" not in err


def test_a_bad_threshold_is_one_error_and_one_hint(clip, capsys) -> None:
    code, err = _run(["describe", str(clip.path), "--model", "test", "--long-after", "-5"],
                     capsys)
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "hint:"))]
    assert code == 2 and [ln.split(":")[0] for ln in lines] == ["error", "hint"]
    assert "threshold" in lines[0] and "Traceback" not in err
