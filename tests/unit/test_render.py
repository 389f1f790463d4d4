"""Overlays, result tables and the annotated video."""

from __future__ import annotations

import csv
import io
import threading
from pathlib import Path

import numpy as np
import pytest

from chord_core.analysis import render
from chord_core.analysis.render import (
    PALETTE_RGB,
    UNTRACKED_RGB,
    Overlay,
    detections_csv,
    export_annotated_video,
    frame_with_boxes,
    timeline_rows,
    track_color,
    track_color_hex,
)
from chord_core.errors import JobCancelled
from chord_core.types import (
    Detection,
    ModelInfo,
    Result,
    SamplingPlan,
    Segment,
    Timing,
    Track,
    VideoInfo,
)

GREY = 90


def det(t: float, bbox: tuple, track_id: int = 1, label: str = "dog",
        wh: tuple[int, int] = (320, 240)) -> Detection:
    px = tuple(round(c * s) for c, s in zip(bbox, wh * 2))
    return Detection(t_s=t, frame_index=round(t * 10), bbox=bbox, bbox_px=px, label=label,
                     track_id=track_id)


def flat(wh: tuple[int, int] = (320, 240)) -> np.ndarray:
    return np.full((wh[1], wh[0], 3), GREY, np.uint8)


def make_result(path: str = "clip.avi", *, fps: float = 10.0, frames: int = 20,
                wh: tuple[int, int] = (320, 240), detections: tuple = (),
                segments: tuple = (), tracks: tuple = (), test_model: bool = False) -> Result:
    video = VideoInfo(path=path, duration_s=frames / fps, fps=fps, frame_count=frames,
                      width=wh[0], height=wh[1])
    plan = SamplingPlan(task="ground", fps=1.0, frame_indices=(0, 10),
                        timestamps_s=(0.0, 1.0), input_wh=(336, 252), visual_tokens=216)
    return Result(task="ground", query="dog", video=video, sampling=plan,
                  model=ModelInfo(id="test", dtype="float32", test_model=test_model),
                  timing=Timing(), detections=detections, tracks=tracks, segments=segments)


# ── colours ──────────────────────────────────────────────────────────────────────────────────

def test_track_colours_stable_distinct_and_grey_for_unlinked() -> None:
    assert track_color(1) == PALETTE_RGB[0] and track_color(2) == PALETTE_RGB[1]
    assert track_color(1 + len(PALETTE_RGB)) == track_color(1)
    assert len(set(PALETTE_RGB)) == len(PALETTE_RGB)
    assert track_color(-1) == UNTRACKED_RGB
    assert track_color_hex(1) == "#%02x%02x%02x" % PALETTE_RGB[0]


# ── overlay pixels ───────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("wh", [(320, 240), (241, 399), (1280, 720)],
                         ids=["landscape", "portrait-odd", "hd"])
def test_box_edges_take_track_colour(wh: tuple[int, int]) -> None:
    image = flat(wh)
    before = image.copy()
    dets = [det(1.0, (0.2, 0.3, 0.6, 0.8), 1, wh=wh), det(1.0, (0.7, 0.1, 0.9, 0.5), 2, "cat",
                                                          wh=wh)]
    out = Overlay().draw(image, dets)
    w, h = wh
    for d in dets:
        x1, y1, x2, y2 = (round(c * s) for c, s in zip(d.bbox, (w, h, w, h)))
        ymid, xmid = (y1 + y2) // 2, (x1 + x2) // 2
        colour = track_color(d.track_id)
        for y, x in [(ymid, x1), (ymid, x2), (y2, xmid)]:  # left, right, bottom edges
            assert tuple(out[y, x]) == colour, (d.track_id, y, x)
        assert tuple(out[ymid, xmid]) == (GREY,) * 3  # inside the box: untouched
    assert tuple(out[int(h * 0.9), int(w * 0.5)]) == (GREY,) * 3  # far from every box
    assert out is not image and np.array_equal(image, before)


def test_label_drawn_in_track_colour_above_box() -> None:
    out = Overlay().draw(flat(), [det(1.0, (0.3, 0.4, 0.7, 0.9), 2, "cat")])
    strip = out[80:94, 96:140].reshape(-1, 3)  # just above the box's top-left corner
    assert (strip == track_color(2)).all(axis=1).sum() > 50
    assert (strip.min(axis=1) > 200).sum() >= 5  # white (anti-aliased) text


def test_unlinked_detection_is_grey() -> None:
    out = Overlay().draw(flat(), [det(1.0, (0.2, 0.3, 0.6, 0.8), -1)])
    assert tuple(out[132, 64]) == UNTRACKED_RGB


@pytest.mark.parametrize("kwargs, region, changed", [
    ({}, "bottom-left", False),
    ({"t_s": 3.5}, "bottom-left", True),
    ({}, "top", False),
    ({"test_model": True}, "top", True),
], ids=["no-time", "time", "no-banner", "banner"])
def test_timestamp_and_banner_regions(kwargs: dict, region: str, changed: bool) -> None:
    out = Overlay().draw(flat(), [], **kwargs)
    patch = out[228:240, 0:60] if region == "bottom-left" else out[0:12, 100:220]
    assert (not np.all(patch == GREY)) is changed


def test_banner_is_red_strip_across_the_top() -> None:
    out = Overlay().draw(flat(), [], test_model=True)
    assert tuple(out[2, 2]) == render.BANNER_BG_RGB and tuple(out[2, 317]) == render.BANNER_BG_RGB


def test_label_prefix_changes_label_only() -> None:
    d = [det(1.0, (0.3, 0.4, 0.7, 0.9), 1)]
    a = Overlay().draw(flat(), d)
    b = Overlay().draw(flat(), d, label_prefix="query: ")
    assert not np.array_equal(a[70:96], b[70:96])
    assert np.array_equal(a[100:], b[100:])


@pytest.mark.parametrize("image", [np.zeros((10, 10), np.uint8), np.zeros((10, 10, 3), float),
                                   np.zeros((10, 10, 4), np.uint8)],
                         ids=["grey", "float", "rgba"])
def test_draw_rejects_non_rgb(image: np.ndarray) -> None:
    with pytest.raises(ValueError, match="RGB uint8"):
        Overlay().draw(image, [])


# ── result helpers ───────────────────────────────────────────────────────────────────────────

TWO = (det(0.0, (0.1, 0.3, 0.4, 0.7)), det(1.0, (0.5, 0.3, 0.8, 0.7)))


def test_frame_with_boxes_interpolates() -> None:
    result = make_result(detections=TWO, test_model=True)
    out = frame_with_boxes(flat(), result, 0.5)
    x = round(0.3 * 320)  # midway between 0.1 and 0.5
    assert tuple(out[120, x]) == track_color(1)
    assert tuple(out[120, round(0.1 * 320)]) == (GREY,) * 3
    assert tuple(out[2, 2]) == render.BANNER_BG_RGB


def test_frame_with_boxes_nothing_after_track_end() -> None:
    out = frame_with_boxes(flat(), make_result(detections=TWO), 1.5)
    assert np.all(out[:200] == GREY)  # only the timestamp in the bottom corner


def test_detections_csv() -> None:
    dets = (det(1.0, (0.5, 0.25, 0.75, 1.0), 2, "cat, black"), det(0.0, (0.1, 0.2, 0.3, 0.4)))
    rows = list(csv.DictReader(io.StringIO(detections_csv(make_result(detections=dets)))))
    assert [r["t_s"] for r in rows] == ["0.000", "1.000"]
    r = rows[1]
    assert (r["label"], r["track_id"], r["frame_index"]) == ("cat, black", "2", "10")
    assert [float(r[k]) for k in ("x1", "y1", "x2", "y2")] == [0.5, 0.25, 0.75, 1.0]
    assert [int(r[k]) for k in ("px_x1", "px_y1", "px_x2", "px_y2")] == [160, 60, 240, 240]


def test_csv_header_only_when_empty() -> None:
    assert detections_csv(make_result()).strip().split(",")[0] == "t_s"
    assert len(detections_csv(make_result()).strip().splitlines()) == 1


def test_timeline_rows() -> None:
    result = make_result(detections=TWO + (det(5.0, (0.1, 0.1, 0.2, 0.2), 2, "cat"),),
                         tracks=(Track(1, "dog", 0.0, 1.0, 2), Track(2, "cat", 5.0, 5.0, 1)),
                         segments=(Segment(2, 5.0, 5.0, "cat"), Segment(1, 0.0, 1.0, "dog")))
    rows = timeline_rows(result)
    assert len({tuple(sorted(r)) for r in rows}) == 1  # same keys everywhere
    segs = [r for r in rows if r["kind"] == "segment"]
    marks = [r for r in rows if r["kind"] == "detection"]
    assert [(r["track"], r["start_s"], r["end_s"]) for r in segs] == [("#1 dog", 0.0, 1.0),
                                                                     ("#2 cat", 5.0, 5.0)]
    assert [(r["t_s"], r["frame_index"], r["track_id"]) for r in marks] == [(0.0, 0, 1),
                                                                          (1.0, 10, 1),
                                                                          (5.0, 50, 2)]
    assert {r["color"] for r in rows if r["track_id"] == 2} == {track_color_hex(2)}


# ── annotated video ──────────────────────────────────────────────────────────────────────────

@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chord_core.testing.videos import make_video

    path = tmp_path_factory.mktemp("clip") / "clip.avi"
    make_video(path, duration_s=2.0, fps=10.0, size_wh=(320, 240), codec="mjpg", boxes=False)
    return path


def read_all(path: Path) -> tuple[list[np.ndarray], float]:
    import cv2

    cap = cv2.VideoCapture(str(path))
    fps = cap.get(cv2.CAP_PROP_FPS)
    frames = []
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    cap.release()
    return frames, fps


def edge_colour(frame: np.ndarray, x: int) -> np.ndarray:
    """Median colour of a thick vertical box edge around column ``x`` (codec-robust)."""
    return np.median(frame[100:140, x - 1:x + 2].reshape(-1, 3), axis=0)


@pytest.mark.parametrize("h264", [True, False], ids=["h264", "opencv-mp4v-fallback"])
def test_export_annotated_video(clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                h264: bool) -> None:
    if h264 and render.h264_encoder() is None:
        pytest.skip("this PyAV has no H.264 encoder")
    if not h264:
        monkeypatch.setattr(render, "h264_encoder", lambda: None)
    result = make_result(str(clip), detections=TWO)
    progress: list[tuple[int, int]] = []
    out = export_annotated_video(clip, result, tmp_path / "sub" / "out.mp4",
                                 on_progress=lambda d, t: progress.append((d, t)),
                                 overlay=Overlay(thickness=8))
    frames, fps = read_all(out)
    assert out.exists() and len(frames) == 20 and fps == pytest.approx(10.0, abs=0.01)
    assert frames[0].shape == (240, 320, 3)
    colour = np.array(track_color(1), float)
    # frame 5 = t 0.5 s: interpolated box, left edge at x = 0.3 × 320
    assert np.abs(edge_colour(frames[5], 96) - colour).max() < 40
    assert np.abs(edge_colour(frames[0], 32) - colour).max() < 40  # sampled frame
    assert np.abs(edge_colour(frames[5], 32) - colour).max() > 60  # old position left behind
    assert np.abs(edge_colour(frames[15], 160) - colour).max() > 60  # after the track ends
    assert progress[-1] == (20, 20)


def test_export_odd_size_is_padded_for_h264(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if render.h264_encoder() is None:
        pytest.skip("this PyAV has no H.264 encoder")
    frames_in = [(i, i / 10, flat((161, 121))) for i in range(5)]
    monkeypatch.setattr(render, "_read_frames", lambda path, fps: iter(frames_in))
    out = export_annotated_video("odd.avi", make_result(frames=5, wh=(161, 121)),
                                 tmp_path / "odd.mp4")
    frames, _ = read_all(out)
    assert len(frames) == 5 and frames[0].shape[:2] == (122, 162)
    assert np.abs(frames[0][60, 80].astype(int) - GREY).max() < 8  # content kept, not scaled


def test_export_without_frames_is_a_video_error(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from chord_core.errors import VideoError

    monkeypatch.setattr(render, "_read_frames", lambda path, fps: iter(()))
    out = tmp_path / "none.mp4"
    with pytest.raises(VideoError, match="no frames"):
        export_annotated_video("empty.mp4", make_result(), out)
    assert not out.exists()


def test_export_cancel_removes_partial_file(clip: Path, tmp_path: Path) -> None:
    cancel = threading.Event()
    calls: list[int] = []

    def on_progress(done: int, total: int) -> None:
        calls.append(done)
        cancel.set()

    out = tmp_path / "cancelled.mp4"
    with pytest.raises(JobCancelled):
        export_annotated_video(clip, make_result(str(clip), detections=TWO), out,
                               on_progress=on_progress, cancel=cancel)
    assert calls == [1] and not out.exists()
