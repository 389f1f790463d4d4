"""A result's notes (chord_core's warnings) in the interface language: the common ones in
Chinese with the model's quoted text kept; unknown ones stay English."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("note", "zh"), [
    ("frame 12 (t=6.00 s): no boxes could be read from the answer: 'a cat'",
     "第 12 帧（t=6.00 秒）：无法从回答中读出框：'a cat'"),
    ("no time span found in the answer 'soon'", "回答中没有找到时间段 'soon'"),
    ("2 planned frame(s) could not be decoded (the file ends early)",
     "2 个计划中的帧无法解码 (the file ends early)"),
    ("something new", "something new"),
], ids=["frame-boxes", "span", "decode", "unknown-kept"])
def test_notes_in_chinese(note: str, zh: str) -> None:
    from chord_ui.messages import localized_note

    assert localized_note(note, "zh") == zh
    assert localized_note(note, "en") == note
