"""A Thinking model's answer split from its reasoning; Thinking checkpoints recognised by id or
chat template; ``reasoning`` in chord.result/v1, optional so old results still validate."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from chord_core.analysis.reasoning import UNFINISHED_WARNING, split_reasoning
from chord_core.families import is_thinking
from chord_core.testing.tiny_qwen3 import CHAT_TEMPLATE, THINKING_CHAT_TEMPLATE
from chord_core.types import Result

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "result.schema.json").read_text())


@pytest.mark.parametrize("text, thinking, answer, reasoning, unfinished", [
    ("Got it.\n</think>\n\n[]", True, "[]", "Got it.", False),
    ("<think>\nSo\n</think>\n\nyes", False, "yes", "So", False),
    ("a</think>b</think> [1, 2, 3, 4]", True, "[1, 2, 3, 4]", "a</think>b", False),
    ("Wait, no, the user's input has", True, "", "Wait, no, the user's input has", True),
    ("<think>still going", False, "", "still going", True),
    ('[{"bbox_2d": [1, 2, 3, 4]}]', False, '[{"bbox_2d": [1, 2, 3, 4]}]', "", False),
    ("", True, "", "", False),
], ids=["closed", "both-tags", "last-close-wins", "thinking-cut", "opened-cut", "instruct",
        "empty"])
def test_split_reasoning(text: str, thinking: bool, answer: str, reasoning: str,
                         unfinished: bool) -> None:
    sp = split_reasoning(text, thinking=thinking)
    assert (sp.answer, sp.reasoning, sp.unfinished) == (answer, reasoning, unfinished)


@pytest.mark.parametrize("family, model_id, template, expected", [
    ("qwen3-vl", "Qwen/Qwen3-VL-8B-Thinking", None, True),
    ("qwen3-vl", "/models/Qwen3-VL-8B-Thinking/", "", True),
    ("qwen3-vl", "test-qwen3-thinking", None, True),
    ("qwen3-vl", "/models/my-finetune", THINKING_CHAT_TEMPLATE, True),
    ("qwen3-vl", "/models/my-finetune", "{{- '<|im_start|>assistant\\n<think>\\n' }}", True),
    ("qwen3-vl", "Qwen/Qwen3-VL-8B-Instruct", CHAT_TEMPLATE, False),
    ("qwen2.5-vl", "someone/Qwen2.5-VL-7B-Thinking", None, False),
], ids=["hub-id", "folder", "test-model", "template", "template-escaped", "instruct",
        "family-without-thinking"])
def test_thinking_checkpoints_are_recognised(family: str, model_id: str, template: str | None,
                                             expected: bool) -> None:
    assert is_thinking(family, model_id, template) is expected


def _doc(**extra) -> dict:
    doc = {"schema": "chord.result/v1", "task": "describe", "query": "", "created_at": "",
           "video": {"path": "a.mp4", "duration_s": 1.0, "fps": 10.0, "frame_count": 10,
                     "width": 64, "height": 48, "codec": "h264"},
           "sampling": {"task": "describe", "fps": 2.0, "frame_indices": [0],
                        "timestamps_s": [0.0], "input_wh": [64, 48], "visual_tokens": 4},
           "model": {"id": "test", "dtype": "float32", "device_map": {}, "test_model": True},
           "timing": {"probe_s": 0, "decode_s": 0, "preprocess_s": 0, "generate_s": 0,
                      "total_s": 0}}
    doc.update(extra)
    return doc


def test_reasoning_is_optional_in_the_schema_and_round_trips() -> None:
    old = Result.from_dict(_doc())
    assert old.reasoning == () and old.model.thinking is False
    jsonschema.validate(old.to_dict(), SCHEMA)
    new = Result.from_dict(_doc(reasoning=["So the dog …"],
                                raw_outputs=["So…</think>\n\nA dog."]))
    assert new.reasoning == ("So the dog …",)
    assert Result.from_dict(new.to_dict()).to_dict() == new.to_dict()
    jsonschema.validate(new.to_dict(), SCHEMA)


def test_build_result_splits_a_thinking_models_outputs() -> None:
    from dataclasses import replace

    from chord_core.analysis.request import AnalysisRequest, build_result

    base = Result.from_dict(_doc())
    model = replace(base.model, thinking=True, family="qwen3-vl", coords="relative1000")
    req = AnalysisRequest("a.mp4", "describe", "what happens?")
    res = build_result(req, base.video, base.sampling, model, base.timing, (),
                       text="Got it, a dog.\n</think>\n\nA dog runs.",
                       raw_outputs=("Got it, a dog.\n</think>\n\nA dog runs.",))
    assert res.text == "A dog runs." and res.reasoning == ("Got it, a dog.",)
    assert res.raw_outputs[0].startswith("Got it")  # the raw text is kept whole
    cut = build_result(req, base.video, base.sampling, model, base.timing, (),
                       text="Wait, no", raw_outputs=("Wait, no",))
    assert cut.text == "" and cut.reasoning == ("Wait, no",)
    assert UNFINISHED_WARNING.startswith("the model was still reasoning")


@pytest.mark.parametrize("thinking, asked, expected", [
    (False, 512, 256), (False, 64, 64), (True, 512, 512), (True, 2048, 2048)],
    ids=["instruct-capped", "instruct-lower", "thinking-default", "thinking-long"])
def test_a_thinking_model_gets_the_whole_limit_per_frame(thinking: bool, asked: int,
                                                         expected: int) -> None:
    from types import SimpleNamespace

    from chord_core.analysis.frame_ground import frame_tokens
    from chord_core.analysis.request import AnalysisRequest

    lm = SimpleNamespace(info=SimpleNamespace(thinking=thinking))
    req = AnalysisRequest("a.mp4", "ground", "a dog", max_new_tokens=asked)
    assert frame_tokens(lm, req) == expected
