"""A request is refused when it is made if the worker would refuse its query later: the
target and the statement meet the same limits at submit as where the prompt is built."""

from __future__ import annotations

import pytest

from chord_core.analysis.entailment import MAX_STATEMENT_CHARS, clean_statement
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import MAX_QUERY_CHARS
from chord_core.errors import ConfigError
from chord_core.model.prompts import MAX_TARGET_CHARS, clean_target


@pytest.mark.parametrize("task,length,ok", [
    ("ground", MAX_TARGET_CHARS, True),
    ("ground", MAX_TARGET_CHARS + 1, False),
    ("entail", MAX_STATEMENT_CHARS, True),
    ("entail", MAX_STATEMENT_CHARS + 1, False),
    ("describe", MAX_QUERY_CHARS, True),
    ("describe", MAX_QUERY_CHARS + 1, False),
], ids=lambda v: str(v))
def test_query_limits_agree_between_submit_and_prompt(task: str, length: int, ok: bool) -> None:
    query = "a" * length
    if ok:
        req = AnalysisRequest("clip.mp4", task, query)
        if task == "ground":
            assert clean_target(req.query) == query  # the worker's check passes too
        elif task == "entail":
            assert clean_statement(req.query) == query
    else:
        with pytest.raises(ConfigError, match="too long|limit"):
            AnalysisRequest("clip.mp4", task, query)


def test_a_target_the_prompt_refuses_is_refused_at_submit() -> None:
    # whitespace folds before the count, exactly as the prompt builder folds it
    spaced = " ".join(["x"] * (MAX_TARGET_CHARS // 2 + 1))  # 301 characters after folding
    assert len(spaced) == MAX_TARGET_CHARS + 1
    with pytest.raises(ConfigError):
        clean_target(spaced)
    with pytest.raises(ConfigError):
        AnalysisRequest("clip.mp4", "ground", spaced)


@pytest.mark.parametrize("task", ["ground", "entail"])
@pytest.mark.parametrize("text", ["\u200b\u200c\ufeff", "\u2060 \u200d", ""],
                         ids=["zero-width", "joiners-and-space", "empty"])
def test_invisible_text_is_refused_like_an_empty_query(task: str, text: str) -> None:
    """The app and the CLI (not only the service) refuse a statement or target of only
    zero-width characters: it used to be scored."""
    with pytest.raises(ConfigError, match="needs"):
        AnalysisRequest("clip.mp4", task, text)


def test_visible_characters_around_invisible_ones_are_kept() -> None:
    assert clean_statement("a\u200b dog\ufeff runs") == "a dog runs"
    assert clean_target("the\u200b cyclist") == "the cyclist"
