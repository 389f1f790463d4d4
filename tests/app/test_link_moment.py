"""A Library hit's "Open in Analyze" link carries the hit's moment (``&t=``): the result's
player is asked to seek there (the numbered seek request it reads when it mounts), and a
``t`` that is not a time asks nothing."""

from __future__ import annotations


def _script() -> None:
    import streamlit as st

    from chord_ui.job_link import _seek_from_url

    _seek_from_url("job-1")
    st.write(st.session_state.get("chord-seek-job-1"))


def test_the_links_moment_becomes_the_players_seek() -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_script)
    at.query_params["t"] = "12.5"
    at.run()
    assert not at.exception
    assert at.session_state["chord-seek-job-1"] == {"t": 12.5, "n": 1}
    for bad in ("x", "-3", "nan", "1e9"):
        other = AppTest.from_function(_script)
        other.query_params["t"] = bad
        other.run()
        assert "chord-seek-job-1" not in other.session_state, bad
