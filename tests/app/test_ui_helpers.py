"""Unit tests of chord_ui's pure parts: figures, formatting, uploads, downloads, key frames."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from chord_core.errors import InputError, ModelNotFoundError
from chord_core.types import (
    Detection,
    ModelInfo,
    ProgressEvent,
    Result,
    SamplingPlan,
    Segment,
    Timing,
    Track,
    VideoInfo,
)
from chord_ui import figures, formatting, uploads
from chord_ui.downloads import DownloadManager


def _result(dets: list[tuple[float, int, int]], segments: list[tuple[int, float, float]],
            n: int = 10, query: str = "red car") -> Result:
    """A grounding result on a 10-frame, 5 s clip; dets = (t, frame index, track id)."""
    info = VideoInfo(path="x.mp4", duration_s=5.0, fps=2.0, frame_count=n, width=640,
                     height=360)
    plan = SamplingPlan(task="ground", fps=2.0, frame_indices=tuple(range(n)),
                        timestamps_s=tuple(i * 0.5 for i in range(n)), input_wh=(448, 252),
                        visual_tokens=n * 144)
    detections = tuple(Detection(t_s=t, frame_index=i, bbox=(0.1, 0.2, 0.3, 0.4),
                                 bbox_px=(64, 72, 192, 144), label=query, track_id=k)
                       for t, i, k in dets)
    tracks = tuple(Track(k, query, a, b, 1) for k, a, b in segments)
    return Result(task="ground", query=query, video=info, sampling=plan,
                  model=ModelInfo(id="m", dtype="bf16"), timing=Timing(),
                  detections=detections, tracks=tracks,
                  segments=tuple(Segment(k, a, b, query) for k, a, b in segments))


# -- figures ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("dets", "segments", "rows", "traces"), [
    ([], [], ["sampled frames"], 1),
    ([(0.5, 1, 1), (1.0, 2, 1)], [(1, 0.5, 1.0)], ["sampled frames", "track 1 · red car"], 3),
    ([(0.5, 1, 1), (3.0, 6, 2), (3.5, 7, -1)], [(1, 0.5, 0.5), (2, 3.0, 3.0)],
     ["sampled frames", "unlinked", "track 2 · red car", "track 1 · red car"], 1 + 2 + 3),
], ids=["nothing-found", "one-track", "two-tracks-and-unlinked"])
def test_timeline_rows_and_traces(dets, segments, rows, traces) -> None:
    fig = figures.timeline_figure(_result(dets, segments))
    assert list(fig.layout.yaxis.categoryarray) == rows
    assert len(fig.data) == traces
    assert tuple(fig.layout.xaxis.range) == (0, 5.0)
    sampled = fig.data[0]
    assert list(sampled.x) == [i * 0.5 for i in range(10)]
    has_note = any(a.text == "no detections" for a in fig.layout.annotations)
    assert has_note == (not dets)


def test_timeline_segment_bar_spans_and_colours_match_boxes() -> None:
    from chord_core.analysis.render import track_color_hex

    fig = figures.timeline_figure(_result([(1.0, 2, 3), (2.0, 4, 3)], [(3, 1.0, 2.0)]),
                                  cursor_s=1.5)
    bar = next(t for t in fig.data if t.type == "bar")
    assert (bar.base[0], bar.x[0]) == (1.0, 1.0)
    assert bar.marker.color == track_color_hex(3)
    markers = next(t for t in fig.data if t.type == "scatter" and t.name.startswith("track"))
    assert list(markers.x) == [1.0, 2.0] and markers.marker.color == track_color_hex(3)
    assert any(s.type == "line" and s.x0 == 1.5 for s in fig.layout.shapes)


def test_history_figure_window_and_gaps() -> None:
    fig = figures.history_figure({"GPU 0": [(-10.0, 5.0), (-5.0, None), (0.0, 7.0)],
                                  "GPU 1": [(0.0, 1.0)]}, title="Utilisation", y_title="%",
                                 y_range=(0, 100), window_s=300)
    assert [t.name for t in fig.data] == ["GPU 0", "GPU 1"]
    assert list(fig.data[0].y) == [5.0, None, 7.0] and fig.data[0].connectgaps is False
    assert tuple(fig.layout.xaxis.range) == (-300, 0)
    assert tuple(fig.layout.yaxis.range) == (0, 100)
    assert fig.layout.showlegend is True


# -- formatting -------------------------------------------------------------------------------

@pytest.mark.parametrize(("n", "text"), [
    (None, "unknown size"), (512, "512 B"), (1536, "1.5 KB"), (7.5e9, "7.5 GB"),
    (2.5e12, "2.5 TB"),
], ids=["none", "bytes", "kb", "gb", "tb"])
def test_human_bytes(n, text) -> None:
    assert formatting.human_bytes(n) == text


@pytest.mark.parametrize(("s", "text"), [
    (12.34, "12.3 s"), (75.2, "1:15"), (3725.0, "1:02:05"), (636.0, "10:36"), (3.0, "3 s"),
    (59.97, "1:00"),
], ids=["seconds", "minutes", "hours", "no-stray-tenths", "whole-seconds", "rounds-up"])
def test_human_duration(s, text) -> None:
    assert formatting.human_duration(s) == text


@pytest.mark.parametrize(("event", "state", "text"), [
    (None, "queued", "Waiting for the worker"),
    (ProgressEvent("probe", "probing a.mp4"), "running", "Probing a.mp4"),
    (ProgressEvent("sampling", "sampling 60 frames at 448×252"), "running",
     "Sampling 60 frames at 448×252"),
    (ProgressEvent("loading_model", "loading model test"), "running", "Loading model test"),
    (ProgressEvent("grounding_frames", "frame 3/60", 3, 60), "running",
     "Looking for the target: frame 3/60"),
    (ProgressEvent("tracking", "linking detections into tracks"), "running",
     "Tracking: linking detections into tracks"),
    (ProgressEvent("brand_new", ""), "running", "Brand new"),
], ids=["queued", "probe", "sampling", "loading", "frames", "tracking", "unknown-stage"])
def test_stage_text(event, state, text) -> None:
    assert formatting.stage_text(event, state) == text


def test_progress_fraction_grows_through_the_frame_loop() -> None:
    evs = [ProgressEvent("probe", ""), ProgressEvent("sampling", "")]
    early = formatting.progress_fraction(evs, "running")
    mid = formatting.progress_fraction(evs + [ProgressEvent("grounding_frames", "", 30, 60)],
                                       "running")
    late = formatting.progress_fraction(evs + [ProgressEvent("tracking", "")], "running")
    assert 0 < early < mid < late < 1
    assert formatting.progress_fraction([], "running") == 0.0
    assert formatting.progress_fraction(evs, "done") == 1.0


@pytest.mark.parametrize(("dets", "segments", "line"), [
    ([], [], "“red car” not found in 10 sampled frames"),
    ([(3.5, 7, 1), (4.0, 8, 1)], [(1, 3.5, 4.0)], "“red car” appears in 1 segment: 3.5–4.0 s"),
], ids=["not-found", "one-segment"])
def test_summary_line(dets, segments, line) -> None:
    assert formatting.summary_line(_result(dets, segments)) == line


def test_detection_rows_have_normalised_boxes_and_no_empty_score() -> None:
    rows = formatting.detections_rows(_result([(0.5, 1, 1), (1.0, 2, -1)], [(1, 0.5, 0.5)]))
    assert rows[0] == {"t (s)": 0.5, "frame": 1, "x1": 0.1, "y1": 0.2, "x2": 0.3, "y2": 0.4,
                       "label": "red car", "track": 1}
    assert rows[1]["track"] is None


def test_test_model_label_is_the_engines() -> None:
    from chord_core.testing.tiny_model import TEST_MODEL_LABEL

    assert formatting.test_model_label() == TEST_MODEL_LABEL == "test model — random weights"


# -- key frames -------------------------------------------------------------------------------

@pytest.mark.parametrize(("hits", "limit", "expect"), [
    ([], 8, []),
    ([1, 2, 3], 8, [1, 2, 3]),
    (list(range(10)), 4, None),
], ids=["none", "fewer-than-limit", "spread"])
def test_key_frame_positions(hits, limit, expect) -> None:
    from chord_ui.results import key_frame_positions

    segs = [(1, 0.0, 1.5), (1, 3.0, 4.5)] if len(hits) == 10 else []
    picks = key_frame_positions(_result([(i * 0.5, i, 1) for i in hits], segs), limit)
    if expect is not None:
        assert picks == expect
    else:
        assert len(picks) == limit and picks == sorted(set(picks))
        assert 0 in picks and 6 in picks  # each segment's first hit is kept


# -- uploads ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "suffix"), [
    ("Clip.MP4", ".mp4"), ("a.webm", ".webm"), ("noext", ".bin"), ("x.exe", ".bin"),
], ids=["upper-mp4", "webm", "no-extension", "not-a-video-type"])
def test_save_upload_by_content_hash(tmp_path: Path, name: str, suffix: str) -> None:
    a = uploads.save_upload(name, b"abc" * 100, tmp_path)
    b = uploads.save_upload("other" + suffix, b"abc" * 100, tmp_path)
    assert a.path == b.path and Path(a.path).suffix == suffix and a.key == b.key
    assert Path(a.path).parent == tmp_path / "uploads"
    assert len(list((tmp_path / "uploads").iterdir())) == 1
    c = uploads.save_upload(name, b"different", tmp_path)
    assert c.key != a.key and Path(c.path).read_bytes() == b"different"


def test_local_source_keys_follow_the_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(tmp_path))
    f = tmp_path / "v.mp4"
    f.write_bytes(b"1")
    k1 = uploads.local_source(str(f)).key
    assert uploads.local_source(f' "{f}" ').key == k1  # quotes and spaces are forgiven
    time.sleep(0.01)
    f.write_bytes(b"22")
    assert uploads.local_source(str(f)).key != k1
    with pytest.raises(InputError, match="no such file in "):  # inside the root: said so
        uploads.local_source(str(tmp_path / "missing.mp4"))
    (tmp_path / "folder.mp4").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        uploads.local_source(str(tmp_path / "folder.mp4"))


# -- downloads --------------------------------------------------------------------------------

def _wait(pred, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_download_manager_progress_done_and_single_start(monkeypatch, tmp_path) -> None:
    import chord_core.model.hub as hub

    gate, calls = threading.Event(), []

    def fake(repo_id, *, on_progress=None, cache_dir=None):
        calls.append(repo_id)
        on_progress(25, 100)
        gate.wait(5)
        return tmp_path

    monkeypatch.setattr(hub, "download_model", fake)
    dm = DownloadManager()
    dm.start("a/b")
    _wait(lambda: dm.status("a/b").done_bytes == 25)
    assert dm.status("a/b").fraction == 0.25 and dm.status("a/b").state == "running"
    dm.start("a/b")  # already running: not started twice
    gate.set()
    _wait(lambda: dm.status("a/b").state == "done")
    assert calls == ["a/b"] and dm.status("a/b").local_path == str(tmp_path)
    assert dm.status("other") is None


@pytest.mark.parametrize(("exc", "message"), [
    (ModelNotFoundError("a/b is gated", hint="log in"), "a/b is gated"),
    (OSError("disk full"), "download failed: disk full"),
], ids=["chord-error", "unexpected-error"])
def test_download_manager_failure_is_readable(monkeypatch, exc, message) -> None:
    import chord_core.model.hub as hub

    def fake(repo_id, *, on_progress=None, cache_dir=None):
        raise exc

    monkeypatch.setattr(hub, "download_model", fake)
    dm = DownloadManager()
    dm.start("a/b")
    _wait(lambda: dm.status("a/b").state == "failed")
    err = dm.status("a/b").error
    assert err["message"] == message and err["hint"]


# -- settings → sampling ----------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "task", "expect"), [
    ({}, "describe", {"fps": None, "max_pixels": 768 * 784, "ground_max_pixels": 1280 * 784}),
    ({"fps": 1.5, "max_frames": 64}, "ground", {"fps": 1.5, "max_frames": 64}),
    ({"tokens_per_frame": 256}, "describe", {"max_pixels": 256 * 784,
                                             "ground_max_pixels": 1280 * 784}),
    ({"tokens_per_frame": 512}, "ground", {"max_pixels": 768 * 784,
                                           "ground_max_pixels": 512 * 784}),
    ({"token_budget": 8000}, "describe", {"token_budget": 8000}),
], ids=["defaults", "explicit-fps", "describe-resolution", "ground-resolution", "budget"])
def test_settings_to_sampling(settings, task, expect) -> None:
    from chord_ui.inputs import Settings

    cfg = Settings(**settings).sampling(task)
    for key, value in expect.items():
        assert getattr(cfg, key) == value
    assert cfg.min_pixels <= cfg.max_pixels


@pytest.mark.parametrize("startup, text", [
    (None, "—"),
    ({"imports_s": 1.2, "load_imports_s": 3.7, "load_weights_s": 2.7, "warmup_total_s": 11.8,
      "total_s": 20.3}, "20.3 s (imports 4.9 s, weights 2.7 s, warm-up 11.8 s)"),
    ({"imports_s": 0.5, "load_s": 1.0, "total_s": 1.6}, "1.6 s (imports 0.5 s)"),  # CPU: none
], ids=["not-ready", "gpu-worker", "cpu-worker-no-warm-up"])
def test_worker_start_up_text(startup, text) -> None:
    from chord_ui.gpu_view import startup_text, worker_table_rows

    assert startup_text(startup) == text
    row = worker_table_rows([{"worker": "gpu0", "devices": [0], "state": "ready",
                              "startup": startup}], manager=None)[0]
    assert row["ready in"] == text and row["devices"] == "cuda:0"


def test_two_pass_results_say_how_many_frames_were_grounded() -> None:
    from dataclasses import replace

    from chord_ui.results import _method_note

    per_frame = _result([(0.5, 1, 1)], [])
    assert _method_note(per_frame) == ""
    two = replace(per_frame, method="two_pass", spans=((0.5, 1.5),), grounded_frames=(1, 2, 3))
    note = _method_note(two)
    assert "two-pass: 3 of 10 frames grounded" in note and "0.5–1.5 s" in note
    assert Result.from_dict(two.to_dict()) == two  # the new fields round-trip


@pytest.mark.parametrize("family, coords", [("qwen2.5-vl", "absolute"),
                                            ("qwen3-vl", "relative1000")])
def test_results_stored_before_coords_get_their_familys_convention(family, coords) -> None:
    info = ModelInfo.from_dict({"id": "m", "dtype": "bfloat16", "family": family})
    assert info.coords == coords


def test_an_old_uploaders_late_empty_change_keeps_the_clip(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    """A rerun asked while an upload's own rerun still runs carries the old uploader, whose
    released file Streamlit reads back as a ``DeletedFile``. Its callback read the current
    (new, empty) uploader and forgot the clip just uploaded: Run stayed off (the browser
    test under load). It reads its own uploader now; an empty one or a released file
    removes nothing and saves nothing (a ``DeletedFile`` has no name: the page crashed)."""
    from types import SimpleNamespace

    from chord_ui import inputs
    from chord_ui.uploads import ClipSource

    from streamlit.runtime.uploaded_file_manager import DeletedFile

    clip = ClipSource(path=str(tmp_path / "a.mp4"), name="a.mp4", key="k", uploaded=True)
    state: dict[str, object] = {inputs.K_UPLOAD_GEN: 1, inputs.K_CLIP: clip,
                                inputs.K_CLIP_ERROR: None, "upload-1": None,
                                "upload-0": DeletedFile("f-1")}  # how Streamlit reads it
    monkeypatch.setattr(inputs, "st", SimpleNamespace(session_state=state))
    inputs._on_upload("upload-0")  # the saved upload's uploader, late: its file released
    inputs._on_upload("upload-1")  # the current one, empty
    assert state[inputs.K_CLIP] is clip and state[inputs.K_UPLOAD_GEN] == 1
