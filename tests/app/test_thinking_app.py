"""AppTest: a Thinking checkpoint in the app (``test-qwen3-thinking``, the Thinking chat
template on random weights). The app's worker loads the model the job names; its entailment
reasons for the generation length, is scored after the closed block, and the results view
shows the reasoning folded under its own expander."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a worker loads a second checkpoint and reasons per frame
REASONING = "Model reasoning (Thinking model)"


def _has_result(at) -> bool:
    return any(s.value for s in at.subheader) or bool(at.error)


def test_a_thinking_entailment_shows_its_reasoning_folded(new_app, poll, monkeypatch,
                                                         app_clip: Path) -> None:
    monkeypatch.setenv("CHORD_MODEL", "test-qwen3-thinking")
    at = new_app().run()
    assert at.sidebar.selectbox(key="model_test_family").value == "test-qwen3-thinking"
    assert any("Qwen3-VL-Thinking family" in c.value for c in at.sidebar.caption)
    at.sidebar.slider(key="max_new_tokens").set_value(128).run()
    at.text_input(key="local_path").input(str(app_clip)).run()
    at.segmented_control(key="task").set_value("entail").run()
    at.text_input(key="entail_statement").input("a green square moves").run()
    at.button(key="run").click().run()
    assert not at.exception
    poll(at, _has_result)
    assert not at.error, [e.value for e in at.error]
    assert [m.label for m in at.metric] == ["entailment", "neutral", "contradiction"]
    folded = [e for e in at.expander if e.label == REASONING]
    assert len(folded) == 1
    assert folded[0].code and folded[0].code[0].value.strip()  # the reasoning text itself
