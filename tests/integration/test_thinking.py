"""Thinking checkpoints end to end on the tiny Qwen3-VL Thinking test checkpoint
(``--model test-qwen3-thinking``: the Thinking chat template, random weights). Its text is
meaningless and it rarely writes ``</think>``, so where a test needs a real Thinking answer the
TEXT is canned at the model boundary (the real requests still run); the entailment path runs
unchanged: the reasoning budget ends the generation, the block is closed and scored there."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from chord_core import AnalysisRequest, Engine, ModelConfig
from chord_core.model import loading
from chord_core.testing.videos import make_video

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "result.schema.json").read_text())
# a Thinking answer whose reasoning quotes the prompt's example box (issue 31: "an example box
# in the reasoning became a whole-image detection")
THOUGHT = ('Got it, the format is [{"bbox_2d": [0, 0, 1000, 1000], "label": "x"}]. The square '
           'is on the left.\n</think>\n\n```json\n[{"bbox_2d": [100, 200, 300, 400], '
           '"label": "the red square"}]\n```')


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(ModelConfig(model="test-qwen3-thinking", device="cpu", batch_size=8))


@pytest.fixture(scope="module")
def clip(clip_dir: Path) -> Path:
    return make_video(clip_dir / "think-2s.mp4", duration_s=2.0, fps=10.0,
                      size_wh=(160, 120)).path


def test_the_thinking_checkpoint_is_recognised(engine: Engine) -> None:
    lm = engine.load()
    assert lm.info.thinking and lm.info.family == "qwen3-vl"
    text = lm.processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], tokenize=False,
        add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n<think>\n")


@pytest.mark.slow  # about 7 s on 2 cores: each frame reasons for its budget first
def test_entailment_reasons_then_scores_after_the_closed_block(engine: Engine, clip: Path,
                                                               monkeypatch) -> None:
    """On the fast decoder the answer is scored from the reasoning's cache (no second pass
    over prompt and image: ``tests/integration/test_think_continue.py`` checks the numbers);
    on transformers' generate the closed text is prefilled again."""
    from chord_core.analysis import entailment

    seen: list[list[str]] = []
    real_inputs = entailment._inputs

    def spy(lm, images, statements, *, texts=None):
        seen.append(list(texts or []))
        return real_inputs(lm, images, statements, texts=texts)

    monkeypatch.setattr(entailment, "_inputs", spy)
    res = engine.analyze(AnalysisRequest(str(clip), "entail", "a red square moves",
                                         max_new_tokens=6))
    jsonschema.validate(res.to_dict(), SCHEMA)
    assert res.model.thinking and res.entailment is not None
    frames = res.sampling.num_frames
    assert len(res.reasoning) == frames == len(res.entailment.frames)
    assert any("reached the 6-token budget" in w for w in res.warnings)
    assert sum(res.entailment.probabilities.values()) == pytest.approx(1, abs=1e-3)
    assert seen == []  # the fast decoder: no second pass
    lm = engine.load()
    monkeypatch.setattr(lm, "decoder", None)  # transformers' generate: the closed text again
    res = engine.analyze(AnalysisRequest(str(clip), "entail", "a red square moves",
                                         max_new_tokens=6))
    scored = [t for batch in seen for t in batch]
    assert len(scored) == frames
    assert all(t.endswith("\n</think>\n\n") and "<think>\n" in t for t in scored)
    assert all(r and r in t for r, t in zip(res.reasoning, scored))  # its own reasoning


def test_grounding_reads_only_the_answer_and_keeps_the_reasoning(engine: Engine, clip: Path,
                                                                 monkeypatch) -> None:
    real = loading.ground_images

    def canned(lm, images, target, **kw):
        return [replace(o, text=THOUGHT) for o in real(lm, images, target, **kw)]

    monkeypatch.setattr(loading, "ground_images", canned)
    res = engine.analyze(AnalysisRequest(str(clip), "ground", "the red square",
                                         score_boxes=False, max_new_tokens=8))
    jsonschema.validate(res.to_dict(), SCHEMA)
    n = res.sampling.num_frames
    assert len(res.detections) == n  # one box a frame, not two: the example is not read
    assert all(d.bbox == pytest.approx((0.1, 0.2, 0.3, 0.4)) for d in res.detections)
    assert res.reasoning == ("Got it, the format is " + THOUGHT.split("Got it, the format is ")[1]
                             .split("\n</think>")[0],) * n
    assert res.raw_outputs[0] == THOUGHT and not any("cut off" in w for w in res.warnings)


def test_grounding_cut_while_reasoning_says_so(engine: Engine, clip: Path) -> None:
    res = engine.analyze(AnalysisRequest(str(clip), "ground", "the red square",
                                         score_boxes=False, max_new_tokens=4))
    jsonschema.validate(res.to_dict(), SCHEMA)
    unfinished = [o for o in res.raw_outputs if "</think>" not in o]
    assert sum("still reasoning" in w for w in res.warnings) == len(unfinished)
    assert len(res.reasoning) == len(res.raw_outputs) and any(res.reasoning)
