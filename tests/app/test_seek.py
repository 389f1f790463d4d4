"""Everything that names a moment seeks the player: numbered seek requests in the session
(key frames' buttons, table rows and chart points through ``on_select``), carried in the
player's data; the statement's moments say how many there are."""

from __future__ import annotations

import pytest
import streamlit as st

from chord_ui.entail_view import moments_text
from chord_ui.player import long_player_data, pending_seek, seek_on_select, seek_to


@pytest.fixture(autouse=True)
def _clean_session():
    for k in list(st.session_state.keys()):
        del st.session_state[k]
    yield


def test_each_click_is_a_new_request() -> None:
    assert pending_seek("job-a") is None
    seek_to("job-a", 3.25)
    seek_to("job-a", 3.25)  # the same moment twice: the player must seek twice
    assert pending_seek("job-a") == {"t": 3.25, "n": 2}
    seek_to("job-a", -1.0)
    assert pending_seek("job-a") == {"t": 0.0, "n": 3} and pending_seek("job-b") is None


@pytest.mark.parametrize(("selection", "times", "want"), [
    ({"rows": [1], "columns": []}, [0.5, 2.5, 4.0], 2.5),
    ({"points": [{"x": 7.5, "y": 0.9}]}, None, 7.5),
    ({"rows": [], "columns": []}, [0.5], None),
    ({"rows": [9]}, [0.5], None),
    ({"points": []}, None, None),
], ids=["table-row", "chart-point", "deselected", "row-out-of-range", "no-point"])
def test_selection_seeks(selection: dict, times: list[float] | None, want: float | None) -> None:
    st.session_state["tbl"] = {"selection": selection}
    seek_on_select("job-a", "tbl", times)
    got = pending_seek("job-a")
    assert (got["t"] if got else None) == want


def test_player_data_carries_the_request() -> None:
    from chord_core.types import VideoInfo

    video = VideoInfo(path="c.mp4", duration_s=10.0, fps=25.0, frame_count=250, width=64,
                      height=48, codec="h264")
    assert long_player_data(video, "", "job-a", chapters=[])["seek"] is None
    seek_to("job-a", 4.0)
    assert long_player_data(video, "", "job-a", chapters=[])["seek"] == {"t": 4.0, "n": 1}


@pytest.mark.parametrize(("times", "limit", "want"), [
    ((), 12, "none"),
    ((1.0, 2.5), 12, "1.0 s, 2.5 s"),
    (tuple(float(i) for i in range(38)), 12,
     ", ".join(f"{i:.1f} s" for i in range(12)) + " … (12 of 38)"),
], ids=["none", "all-fit", "12-of-38"])
def test_moments_say_how_many_there_are(times: tuple, limit: int, want: str) -> None:
    assert moments_text(times, limit) == want


@pytest.mark.parametrize(("start", "end", "want"), [
    (1010.2, 1010.9, "at 16:50"),
    (1010.0, 1030.0, "16:50 to 17:10"),
    (3725.0, 3725.0, "at 1:02:05"),
], ids=["one-moment", "range", "hours"])
def test_search_hits_read_as_times(start: float, end: float, want: str) -> None:
    from chord_ui.long_view import span_text

    assert span_text(start, end) == want


@pytest.mark.parametrize(("text", "want"), [
    ("notavideo.mp4 could not be read", "notavideo.mp4 could not be read"),
    ("/data/x.mp4 is not a video file", "/data/x.mp4 is not a video file"),
    ("the hub is not reachable", "The hub is not reachable"),
    ("incomplete: missing config.json", "Incomplete: missing config.json"),
    ("job-1a2b is gone", "job-1a2b is gone"),
    ("", ""),
], ids=["file-name", "path", "words", "word-colon", "id", "empty"])
def test_names_are_not_capitalised(text: str, want: str) -> None:
    from chord_ui.formatting import sentence_start

    assert sentence_start(text) == want


@pytest.mark.parametrize(("task", "duration", "words"), [
    ("describe", 20 * 60.0, "about 20 chunks of about 1 min each, 16 pictures per chunk, and "
                            "merge them into about 4 chapter(s)"),
    ("ground", 20 * 60.0, "1,200 pictures, one every 1 s, in 5 jobs of up to 256 pictures"),
], ids=["chapters", "ground"])
def test_long_plan_says_what_will_run(task: str, duration: float, words: str) -> None:
    from chord_core.longvideo.settings import LongVideoSettings
    from chord_ui.wording import long_plan_words

    text = long_plan_words(LongVideoSettings(), duration, task, "en")
    assert words in text and "CHORD_" not in text


def test_placeholders_are_paths_under_a_root(tmp_path, monkeypatch) -> None:
    from chord_core.media.roots import configured_roots, is_under
    from chord_ui.formatting import root_example

    monkeypatch.setenv("CHORD_MEDIA_ROOTS", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    example = root_example("clip.mp4")
    assert example == str((tmp_path / "a").resolve() / "clip.mp4")
    from pathlib import Path

    assert is_under(Path(example), configured_roots()) and root_example() == str(
        (tmp_path / "a").resolve())
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", "off")
    assert root_example("clip.mp4") == ""
