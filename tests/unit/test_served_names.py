"""The OpenAI chat endpoint answers to every name a client may hold for the served model:
its hub id, its folder name, ``Qwen/<folder>`` for a downloaded Qwen folder, and ``chord``."""

from __future__ import annotations

import pytest

from chord_core.service.chat import ChatBody, _check
from chord_core.service.http_errors import ApiError
from chord_core.service.settings import settings_from_env

MSG = [{"role": "user", "content": "hi"}]
SETTINGS = settings_from_env({})  # the defaults: the caps do not come into these cases


@pytest.mark.parametrize(("served", "asked"), [
    ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"),
    ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen2.5-VL-3B-Instruct"),
    ("Qwen/Qwen2.5-VL-3B-Instruct", "qwen/qwen2.5-vl-3b-instruct"),
    ("/data/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"),
    ("/data/Qwen2.5-VL-3B-Instruct", "Qwen2.5-VL-3B-Instruct"),
    ("/data/Qwen2.5-VL-3B-Instruct/", "/data/Qwen2.5-VL-3B-Instruct/"),
    ("test", "chord"),
    ("test", None),
], ids=["hub-id", "hub-name", "hub-id-any-case", "folder-as-hub-id", "folder-name",
        "folder-path", "alias", "no-model"])
def test_served_model_names_are_accepted(served: str, asked: str | None) -> None:
    limit, notes = _check(ChatBody(model=asked, messages=MSG), served, SETTINGS)
    assert limit == 512 and notes == []


@pytest.mark.parametrize(("served", "asked"), [
    ("test", "Qwen/Qwen2.5-VL-3B-Instruct"),
    ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct"),
    ("/srv/models/mine", "Qwen/mine"),
], ids=["test-model-not-qwen", "other-size", "non-qwen-folder"])
def test_other_models_are_404_naming_what_is_served(served: str, asked: str) -> None:
    with pytest.raises(ApiError) as err:
        _check(ChatBody(model=asked, messages=MSG), served, SETTINGS)
    assert err.value.status == 404
    assert repr(asked) in err.value.message and "'chord'" in err.value.hint
