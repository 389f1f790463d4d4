"""Qwen3-VL end to end on its tiny random-weight checkpoint (``--model test-qwen3``): results
say family and coordinate convention, and two-pass grounding grounds only the frames inside
the first pass's spans. The random model cannot answer "when", so the first pass's TEXT is
canned at the model boundary (the real video request still runs); everything else is real."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from chord_core import AnalysisRequest, Engine, ModelConfig
from chord_core.analysis import two_pass
from chord_core.analysis.ground_chunks import FrameOutput, GroundChunk, assemble_ground
from chord_core.testing.videos import make_video

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "result.schema.json").read_text())


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(ModelConfig(model="test-qwen3", device="cpu", batch_size=8))


@pytest.fixture(scope="module")
def clip(clip_dir: Path) -> Path:
    return make_video(clip_dir / "q3-6s.mp4", duration_s=6.0, fps=10.0).path


@pytest.fixture
def canned(monkeypatch: pytest.MonkeyPatch) -> list:
    """Replace the first pass's answer text (the model still runs); records what it saw."""
    seen: list = []
    real = two_pass.ask_spans

    def set_answer(text: str) -> None:
        def ask(lm, frames, meta, target, cancel=None):
            out = real(lm, frames, meta, target, cancel)
            seen.append((frames.shape, list(meta["timestamps_s"])))
            return replace(out, text=text)

        monkeypatch.setattr(two_pass, "ask_spans", ask)

    seen.append(set_answer)
    return seen


def _ground(engine: Engine, clip: Path, method: str = "per_frame"):
    return engine.analyze(AnalysisRequest(str(clip), "ground", "the red square",
                                          score_boxes=False, ground_method=method))


def test_per_frame_result_carries_family_and_coords(engine: Engine, clip: Path) -> None:
    res = _ground(engine, clip)
    doc = res.to_dict()
    jsonschema.validate(doc, SCHEMA)
    assert doc["model"]["family"] == "qwen3-vl" and doc["model"]["coords"] == "relative1000"
    assert doc["method"] == "per_frame" and doc["spans"] == [] and doc["grounded_frames"] is None
    assert len(res.raw_outputs) == res.sampling.num_frames == 12


def test_two_pass_grounds_only_frames_inside_the_spans(engine: Engine, clip: Path,
                                                       canned: list) -> None:
    canned[0]('[{"start": 1.0, "end": 2.0}, {"start": 99, "end": 100}]')
    res = _ground(engine, clip, "two_pass")
    jsonschema.validate(res.to_dict(), SCHEMA)
    assert res.method == "two_pass" and res.spans == ((1.0, 2.0),)
    plan = res.sampling
    assert plan.num_frames == 12  # every sampled frame was read and seen by the first pass
    grounded = res.grounded_frames
    times = [plan.timestamps_s[plan.frame_indices.index(i)] for i in grounded]
    assert 0 < len(grounded) < 12 and all(0.5 - 1e-6 <= t <= 2.5 + 1e-6 for t in times)
    assert res.raw_outputs[0].startswith('[{"start": 1.0') and len(res.raw_outputs) == \
        len(grounded) + 1
    assert any("after the clip's end" in w for w in res.warnings)
    assert any(f"grounded {len(grounded)} of 12" in n for n in plan.notes)
    shape, seen_times = canned[1]
    assert shape[0] == 12 and seen_times == list(plan.timestamps_s)  # the frames' own times
    assert all(d.frame_index in grounded for d in res.detections)


@pytest.mark.parametrize("answer, method, frames", [
    ("[]", "two_pass", 0),                   # "never visible": nothing to ground
    ("no idea, sorry", "per_frame", 12),     # unusable: the exact path, with a warning
], ids=["never", "garbage"])
def test_two_pass_without_spans(engine: Engine, clip: Path, canned: list, answer: str,
                                method: str, frames: int) -> None:
    canned[0](answer)
    res = _ground(engine, clip, "two_pass")
    jsonschema.validate(res.to_dict(), SCHEMA)
    grounded = 12 if res.grounded_frames is None else len(res.grounded_frames)
    assert (res.method, grounded) == (method, frames)
    assert res.raw_outputs[0] == answer
    if method == "per_frame":
        assert any("no usable time span" in w for w in res.warnings)
    else:
        assert res.detections == () and res.spans == ()


def test_relative_boxes_are_normalised_against_the_image() -> None:
    from chord_core.types import SamplingPlan, VideoInfo

    info = VideoInfo(path="x.mp4", duration_s=1.0, fps=10.0, frame_count=10, width=640,
                     height=480)
    plan = SamplingPlan(task="ground", fps=1.0, frame_indices=(0,), timestamps_s=(0.0,),
                        input_wh=(448, 320), visual_tokens=1)
    out = FrameOutput(0, 0.0, '[{"bbox_2d": [100, 250, 500, 750], "label": "dog"}]', (448, 320))
    body = assemble_ground(info, plan, "dog", [GroundChunk((out,))], "relative1000")
    det = body["detections"][0]
    assert det.bbox == pytest.approx((0.1, 0.25, 0.5, 0.75)) and tuple(det.bbox_px) == \
        (64, 120, 320, 360)


def test_describe_and_cli_two_pass(engine: Engine, clip: Path, tmp_path: Path) -> None:
    res = engine.analyze(AnalysisRequest(str(clip), "describe", "", max_new_tokens=128))
    jsonschema.validate(res.to_dict(), SCHEMA)
    assert res.method is None and res.model.family == "qwen3-vl"
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "chord_core", "ground", str(clip), "the red square",
         "--model", "test-qwen3", "--device", "cpu", "--method", "two_pass", "--json",
         str(out), "--quiet"], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["method"] in ("per_frame", "two_pass") and doc["model"]["coords"] == \
        "relative1000"


def test_two_pass_on_a_still_image_grounds_it_directly(engine: Engine, tmp_path: Path) -> None:
    import cv2
    import numpy as np

    image = tmp_path / "still.png"
    cv2.imwrite(str(image), np.full((120, 160, 3), 90, np.uint8))
    res = engine.analyze(AnalysisRequest(str(image), "ground", "the square", score_boxes=False,
                                         ground_method="two_pass"))
    jsonschema.validate(res.to_dict(), SCHEMA)
    assert res.method == "per_frame" and res.sampling.num_frames == 1
    assert len(res.raw_outputs) == 1 and any("grounded per frame" in w for w in res.warnings)
