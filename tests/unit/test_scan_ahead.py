"""The cut scan started while the workers load (``chapters.ScanAhead``): the same cuts as
scanning in line, its error raised where the run asks, stopped when nothing will use it, and
a run given it does not scan again. Real clips written with PyAV; no model."""

from __future__ import annotations

import pytest

from chord_core.errors import JobCancelled
from chord_core.longvideo import chapters as chapters_mod
from chord_core.longvideo.chapters import ChaptersRun, ScanAhead
from chord_core.longvideo.scenes import find_cuts
from chord_core.longvideo.settings import LongVideoSettings
from chord_core.media.probe import probe
from chord_core.testing.scenes import even_times, make_scene_clip

pytest.importorskip("av")
SETTINGS = LongVideoSettings(cuts="scene", chunk_s=4, min_chunk_s=2, max_chunk_s=10)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_scene_clip(tmp_path_factory.mktemp("ahead") / "scenes.mp4", [50, 120],
                           even_times(180, 10.0))


def test_the_scan_ahead_finds_the_cuts_a_scan_in_line_finds(clip) -> None:
    info = probe(clip.path)
    ahead = ScanAhead(info, SETTINGS)
    got, inline = ahead.result(), find_cuts(info, SETTINGS)
    assert [c.frame_index for c in got.cuts] == [c.frame_index for c in inline.cuts] \
        == [50, 120]
    assert got.mode == inline.mode == "scene" and got.frames_examined == 180


def test_a_run_given_the_scan_plans_from_it_without_scanning_again(clip, monkeypatch
                                                                   ) -> None:
    info = probe(clip.path)
    ahead = ScanAhead(info, SETTINGS)
    ahead.result()

    def scanned_again(*_a, **_k):
        raise AssertionError("the run scanned the clip again")

    monkeypatch.setattr(chapters_mod, "find_cuts", scanned_again)
    run = ChaptersRun(object(), info, "key", SETTINGS, "test", scan=ahead)  # no store
    scan, chunks = run.plan()
    assert [c.frame_index for c in scan.cuts] == [50, 120]
    assert [c.first_frame for c in chunks][:3] == [0, 50, 120]
    with pytest.raises(AssertionError, match="scanned the clip again"):
        ChaptersRun(object(), info, "key", SETTINGS, "test").plan()  # without it: scans


def test_the_scans_error_is_raised_where_the_run_asks_for_it(clip, monkeypatch) -> None:
    def broken(*_a, **_k):
        raise ValueError("the index is unreadable")

    monkeypatch.setattr(chapters_mod, "find_cuts", broken)
    ahead = ScanAhead(probe(clip.path), SETTINGS)
    with pytest.raises(ValueError, match="unreadable"):
        ahead.result()


def test_cancel_stops_the_scan_and_says_so(clip, monkeypatch) -> None:
    import threading

    started = threading.Event()

    def slow_scan(info, settings, *, cancel):  # a scan that runs until it is stopped
        started.set()
        while not cancel.wait(0.01):
            pass
        raise JobCancelled("reading the video was cancelled", hint="")

    monkeypatch.setattr(chapters_mod, "find_cuts", slow_scan)
    ahead = ScanAhead(probe(clip.path), SETTINGS)
    assert started.wait(5)
    ahead.cancel()
    with pytest.raises(JobCancelled):
        ahead.result()
