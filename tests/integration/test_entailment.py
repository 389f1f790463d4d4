"""Visual entailment with the tiny model: schema, label probabilities, the verdict over a
clip, images as one-frame clips, batching equal to one by one, grounding scores."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from PIL import Image

from chord_core.analysis.engine import Engine
from chord_core.analysis.entailment import LABELS, normalise_label, summarise
from chord_core.analysis.ground_chunks import FrameOutput, assemble_ground
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.errors import ConfigError, InputError
from chord_core.testing.videos import make_video
from chord_core.types import EntailFrame, Result

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "result.schema.json").read_text())


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Engine:
    return Engine(ModelConfig(model="test", device="cpu"))


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("entail")
    rng = np.random.default_rng(0)
    out = {"clip": make_video(d / "clip.mp4", duration_s=3.0, fps=10.0,
                              size_wh=(160, 120)).path}
    for i in range(3):
        out[f"img{i}"] = d / f"img{i}.png"
        Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(out[f"img{i}"])
    out["bad"] = d / "bad.png"
    out["bad"].write_bytes(b"not an image at all")
    out["empty"] = d / "empty.jpg"
    out["empty"].write_bytes(b"")
    return out


def _probs_ok(probs: dict) -> None:
    assert set(probs) == set(LABELS)
    assert all(0 <= p <= 1 for p in probs.values())
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-4)


def test_a_clip_gives_a_curve_a_verdict_and_moments(engine, media) -> None:
    result = engine.analyze(AnalysisRequest(str(media["clip"]), "entail", "a green square"))
    doc = result.to_dict()
    jsonschema.validate(doc, SCHEMA)
    ent = result.entailment
    assert doc["task"] == "entail" and ent.statement == "a green square"
    assert [f.frame_index for f in ent.frames] == list(result.sampling.frame_indices)
    assert [f.t_s for f in ent.frames] == list(result.sampling.timestamps_s)
    assert result.sampling.fps == pytest.approx(2.0, rel=0.2)  # 2 fps on a short clip
    for f in ent.frames:
        _probs_ok(f.probabilities())
    _probs_ok(ent.probabilities)
    assert ent.verdict in LABELS
    assert set(ent.supporting_s) == {f.t_s for f in ent.frames if f.label == "entailment"}
    assert Result.from_dict(doc).entailment == ent
    assert any("answer words" in w for w in result.warnings)  # random weights: said so


def test_images_are_one_frame_clips(engine, media) -> None:
    result = engine.analyze(AnalysisRequest(str(media["img0"]), "entail", "a cat"))
    assert result.video.container == "image" and result.video.size_wh == (400, 300)
    assert result.sampling.frame_indices == (0,) and result.sampling.timestamps_s == (0.0,)
    assert result.sampling.visual_tokens <= 256  # ≈ 448×448 at most
    assert len(result.entailment.frames) == 1
    described = engine.analyze(AnalysisRequest(str(media["img1"]), "describe", "what is it?",
                                               max_new_tokens=128))
    assert described.sampling.frame_indices == (0,) and described.text is not None


@pytest.mark.parametrize("name", ["bad", "empty"], ids=["garbage", "zero-bytes"])
def test_a_bad_image_is_a_clear_input_error(engine, media, name) -> None:
    with pytest.raises(InputError) as err:
        engine.analyze(AnalysisRequest(str(media[name]), "entail", "x"))
    assert media[name].name in err.value.message and err.value.hint


def test_entail_many_equals_one_by_one_and_isolates_bad_files(engine, media) -> None:
    reqs = [AnalysisRequest(str(media[f"img{i}"]), "entail", f"statement number {i}")
            for i in range(3)]
    reqs.insert(1, AnalysisRequest(str(media["bad"]), "entail", "anything"))
    out = engine.entail_many(reqs)
    assert isinstance(out[1], InputError)
    for req, res in zip([reqs[0], reqs[2], reqs[3]], [out[0], out[2], out[3]]):
        alone = engine.analyze(req).entailment.probabilities
        for k in LABELS:
            assert res.entailment.probabilities[k] == pytest.approx(alone[k], abs=1e-4)
        assert res.query == req.query


def test_a_call_of_one_pass_is_scored_in_two_halves_with_the_same_answers(
        engine, media, monkeypatch) -> None:
    """A call that fits one forward pass (a 32-task ``/batch_predict`` request) runs as two
    passes of half its pairs, so the second half is read while the first is scored; the
    answers are those of the one pass."""
    from chord_core.analysis import entail_batch, entailment

    assert [entail_batch.pass_size(n, 32) for n in (32, 20, 16, 15, 33, 64)] == \
        [16, 10, 8, 32, 32, 32]
    reqs = [AnalysisRequest(str(media[f"img{i % 3}"]), "entail", f"statement number {i}")
            for i in range(18)]
    assert entail_batch._pairs(reqs, None) == 18  # unplanned images: a pair each
    clip = [AnalysisRequest(str(media["clip"]), "entail", "a clip")]  # frames unknown yet
    assert entail_batch.pass_size(entail_batch._pairs(clip + reqs[:17], None), 32) == 32
    rows: list[int] = []
    real = entailment._prefill

    def counted(lm, inputs):
        rows.append(int(inputs["input_ids"].shape[0]))
        return real(lm, inputs)

    monkeypatch.setattr(entailment, "_prefill", counted)
    halves = engine.entail_many(reqs)
    assert rows == [9, 9]
    rows.clear()
    monkeypatch.setattr(entail_batch, "MIN_SPLIT", 100)  # one pass, as before the split
    whole = engine.entail_many(reqs)
    assert rows == [18]
    for a, b in zip(halves, whole):
        assert a.query == b.query
        for k in LABELS:
            assert a.entailment.probabilities[k] == pytest.approx(
                b.entailment.probabilities[k], abs=1e-4)


@pytest.mark.parametrize(("word", "label"), [
    ("yes", "entailment"), ("Maybe", "neutral"), ("NO", "contradiction"),
    ("entailment", "entailment"), (" neutral ", "neutral"), ("contradiction", "contradiction"),
], ids=["yes", "maybe", "no", "entailment", "neutral", "contradiction"])
def test_both_spellings_of_the_labels(word, label) -> None:
    assert normalise_label(word) == label


def test_bad_labels_and_statements() -> None:
    with pytest.raises(ConfigError):
        normalise_label("perhaps")
    with pytest.raises(ConfigError):
        AnalysisRequest("x.mp4", "entail", "   ")


def _frame(t: float, e: float, n: float, c: float) -> EntailFrame:
    return EntailFrame(t, int(t * 10), e, n, c)


@pytest.mark.parametrize(("frames", "verdict", "support", "against"), [
    ([_frame(0, .1, .1, .8), _frame(1, .7, .2, .1), _frame(2, .2, .1, .7)], "entailment",
     (1.0,), (0.0, 2.0)),
    ([_frame(0, .1, .1, .8), _frame(1, .2, .1, .7), _frame(2, .2, .6, .2)], "contradiction",
     (), (0.0, 1.0)),
    ([_frame(0, .1, .8, .1), _frame(1, .2, .1, .7)], "neutral", (), (1.0,)),
], ids=["holds-at-a-moment", "mostly-contradicted", "undecided"])
def test_verdict_rule(frames, verdict, support, against) -> None:
    ent = summarise("s", frames)
    assert ent.verdict == verdict
    assert ent.supporting_s == support and ent.contradicting_s == against
    if verdict == "entailment":
        assert ent.probabilities == frames[1].probabilities()


def test_grounding_boxes_get_scores_from_their_crops(engine) -> None:
    from chord_core.analysis.box_scores import crop, score_outputs
    from chord_core.media.sampling import plan_sampling
    from chord_core.types import VideoInfo

    lm = engine.load()
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (2, 252, 448, 3), dtype=np.uint8)
    text = '[{"bbox_2d": [10, 20, 200, 120], "label": "car"}, {"bbox_2d": [300, 100, 310, 108]}]'
    outs = [FrameOutput(i, i * 0.5, text if i == 0 else "[]", (448, 252)) for i in range(2)]
    scored, seconds = score_outputs(lm, outs, frames, "a car")
    assert len(scored[0].scores) == 2 and scored[1].scores == () and seconds > 0
    assert all(0 <= s <= 1 for s in scored[0].scores)
    assert crop(frames[0], (0.67, 0.4, 0.69, 0.43)).shape == (56, 56, 3)  # tiny box scaled up
    info = VideoInfo("x.mp4", 1.0, 10.0, 10, 448, 252)
    plan = plan_sampling(info, "ground")
    from chord_core.analysis.ground_chunks import GroundChunk

    body = assemble_ground(info, plan, "a car", [GroundChunk(scored)], "absolute")
    assert [d.score for d in body["detections"]] == list(scored[0].scores)
