"""An alert's toast shows the clip's name and the statement as literal text (Streamlit's
toast renders Markdown links and images). A file name is anyone's who may write to a watched
folder: ``![x](http:…)`` in it made every open app page fetch that image (it learns who looks,
and when), and ``[…](…)`` showed a link. In Streamlit's AppTest, over a real alerts store."""

from __future__ import annotations

import pytest

NAME = "![x](http:example.invalid) [open me](http:example.invalid) **now**.mp4"


@pytest.fixture
def alert_index(tmp_path, monkeypatch):
    from chord_core.library.alerts import store_alert
    from chord_core.library.index import LibraryIndex
    from chord_ui import resources

    with LibraryIndex(tmp_path / "chord.sqlite3") as index:
        store_alert(index, "w", {"clip_key": "k", "statement": "a `van` at the [dock]",
                                 "path": str(tmp_path / NAME), "job_id": "j1"},
                    {"start_s": 1.0, "end_s": 1.4, "probability": 0.9, "evidence": []})
        monkeypatch.setattr(resources, "library_index", lambda: index)
        yield index


def _toasts() -> None:
    import streamlit as st

    from chord_ui import library_view

    st.session_state.setdefault(library_view.K_ALERT_SEEN, 0)  # alerts after id 0 are new
    library_view.alert_toasts()


def test_an_alert_toast_shows_the_file_name_as_text(alert_index) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_toasts, default_timeout=30).run()
    assert not at.exception, at.exception
    bodies = [toast.value for toast in at.toast]
    assert len(bodies) == 1, bodies
    body = bodies[0]
    assert "\\!\\[x\\]\\(http:example.invalid\\)" in body and "\\[open me\\]" in body, body
    assert "\\*\\*now\\*\\*" in body and "a \\`van\\` at the \\[dock\\]" in body, body
    assert "](" not in body.replace("\\](", "")  # no link or image left
