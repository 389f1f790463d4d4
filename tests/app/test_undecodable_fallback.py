"""A clip whose player reported a decode error (the video element's ``error`` event, sent by
player.js as the component's ``decode_error`` trigger) is played from a transcoded preview,
said so; other clips still play as they are."""

from __future__ import annotations

from pathlib import Path


def _script(path: str, fail: bool) -> None:
    import streamlit as st

    from chord_core.media.probe import probe
    from chord_ui.clip_view import playable_path
    from chord_ui.player import undecodable
    from chord_ui.uploads import local_source

    clip = local_source(path)
    if fail:
        undecodable().add(clip.path)
    st.write(f"PLAYS {playable_path(clip, probe(clip.path))}")


def test_a_clip_the_browser_could_not_decode_gets_a_preview(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from chord_core.testing.videos import make_video

    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(tmp_path))
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    clip = make_video(tmp_path / "cam.mp4", duration_s=1.0, fps=10.0, size_wh=(96, 72)).path
    plays = {}
    for fail in (False, True):
        at = AppTest.from_function(_script, args=(str(clip), fail), default_timeout=60).run()
        assert not at.exception, at.exception
        plays[fail] = next(m.value for m in at.markdown if m.value.startswith("PLAYS "))[6:]
        notes = " ".join(c.value for c in at.caption)
        assert ("could not decode" in notes) == fail
    assert plays[False] == str(clip.resolve()) or Path(plays[False]).name == "cam.mp4"
    assert plays[True] != plays[False] and Path(plays[True]).is_file()
    assert Path(plays[True]).parent.name == "previews" or "preview" in plays[True]
