"""read_frames / iter_frames on synthetic clips: the right frames (index band), size, RGB
order, upright orientation, sequential == one-by-one (PyAV and OpenCV routes), the OpenCV
cursor seeking only when safe, missing frames, cancellation; and the synthetic clips' own
ground truth. The PyAV route's own seeking, fallback and agreement with OpenCV:
test_av_reader.py."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from chord_core.config import SamplingConfig
from chord_core.errors import JobCancelled, VideoError
from chord_core.media import video
from chord_core.media.probe import probe
from chord_core.media.sampling import plan_sampling
from chord_core.media.video import iter_frames, read_frames
from chord_core.testing.videos import (
    SyntheticVideo,
    has_pyav,
    make_undecodable,
    make_video,
)

# read_frames' default "auto" is PyAV with OpenCV as the fallback
BACKENDS = [pytest.param("pyav", marks=pytest.mark.skipif(not has_pyav(), reason="needs PyAV")),
            "opencv"]
CODECS = [("c.mp4", "mp4v"), ("c.avi", "mjpg"), ("c.webm", "vp90"), ("c.mp4", "h264"),
          ("c.mkv", "h264"), ("c.webm", "vp9")]


class Clips(dict):
    """Clips by name; asking for one that needs PyAV on a host without it skips the test."""

    def __missing__(self, key: str) -> SyntheticVideo:
        pytest.skip(f"clip {key!r} needs PyAV (package av), which is not installed")


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Clips:
    d = tmp_path_factory.mktemp("clips")
    out = Clips({f"{codec}-{name}": make_video(d / f"{codec}-{name}", duration_s=3, fps=10,
                                                size_wh=(320, 240), codec=codec)
                 for name, codec in CODECS if codec not in ("h264", "vp9") or has_pyav()})
    if has_pyav():
        for rot in (90, 180, 270):
            out[f"rot{rot}"] = make_video(d / f"rot{rot}.mp4", duration_s=1, fps=10,
                                          size_wh=(320, 240), rotation=rot)
        out["vfr"] = make_video(d / "vfr.mkv", duration_s=3, fps=10, size_wh=(160, 120),
                                vfr=True)
    return out


@pytest.fixture(scope="module")
def long_clips(tmp_path_factory: pytest.TempPathFactory) -> Clips:
    d = tmp_path_factory.mktemp("long")
    out = Clips(cfr=make_video(d / "long.mp4", duration_s=100, fps=30, size_wh=(96, 64),
                               codec="mp4v"))
    if has_pyav():
        out["h264"] = make_video(d / "long.mkv", duration_s=100, fps=30, size_wh=(96, 64))
        out["vfr"] = make_video(d / "longvfr.mkv", duration_s=100, fps=30, size_wh=(96, 64),
                                vfr=True)
        out["ramp"] = make_video(d / "ramp.mkv", duration_s=100, fps=30, size_wh=(96, 64),
                                 vfr="ramp")
    return out


@pytest.fixture
def grab_counter(count_grabs) -> list[int]:
    return count_grabs(video)


def _mean_rgb(frame: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """Mean colour of the central half of a normalised box."""
    h, w = frame.shape[:2]
    x1, y1, x2, y2 = box
    cx1, cx2 = x1 + (x2 - x1) / 4, x2 - (x2 - x1) / 4
    cy1, cy2 = y1 + (y2 - y1) / 4, y2 - (y2 - y1) / 4
    return frame[int(cy1 * h):int(cy2 * h), int(cx1 * w):int(cx2 * w)].reshape(-1, 3).mean(0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key", [f"{c}-{n}" for n, c in CODECS])
def test_read_frames_right_frames_size_and_rgb(clips: Clips, key: str, backend: str) -> None:
    sv = clips[key]
    want = (0, 3, 4, 17, 29)
    frames, read = read_frames(sv.path, want, size_wh=(224, 168), backend=backend)
    assert read == want
    assert frames.shape == (5, 168, 224, 3) and frames.dtype == np.uint8
    assert [sv.index_of(f) for f in frames] == list(want)
    patches = sv.patch_boxes()
    for f in frames:
        red, blue = _mean_rgb(f, patches["red"][0]), _mean_rgb(f, patches["blue"][0])
        assert red[0] > 180 and red[2] < 70, red
        assert blue[2] > 180 and blue[0] < 70, blue


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("key", ["mp4v-c.mp4", "vp90-c.webm", "h264-c.mkv", "vp9-c.webm", "vfr"])
def test_sequential_read_equals_one_by_one(clips: Clips, key: str, backend: str) -> None:
    sv = clips[key]
    every = tuple(range(sv.frame_count))
    frames, read = read_frames(sv.path, every, backend=backend)
    assert read == every
    for i in (0, 1, sv.frame_count // 2, sv.frame_count - 1):
        single, got = read_frames(sv.path, [i], backend=backend)
        assert got == (i,)
        np.testing.assert_array_equal(single[0], frames[i])
    assert [sv.index_of(f) for f in frames] == list(every)


def test_read_frames_native_size(clips: Clips) -> None:
    frames, _ = read_frames(clips["mp4v-c.mp4"].path, [0, 1])
    assert frames.shape == (2, 240, 320, 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rot", [90, 180, 270])
def test_rotated_clips_are_upright_once(clips: Clips, rot: int, backend: str) -> None:
    sv = clips[f"rot{rot}"]
    dw, dh = sv.display_wh
    frames, _ = read_frames(sv.path, [0, 5], size_wh=(dw // 2, dh // 2), backend=backend)
    assert frames.shape[1:3] == (dh // 2, dw // 2)
    red = _mean_rgb(frames[0], sv.patch_boxes()["red"][0])
    assert red[0] > 180 and red[1] < 70 and red[2] < 70, red  # the red patch is where truth says
    assert [sv.index_of(f) for f in frames] == [0, 5]
    # the moving square is where the (displayed) ground truth puts it
    green = _mean_rgb(frames[1], sv.box_at(5))
    assert green[1] > 150 and green[0] < 70, green
    # rotation=0 overrides the metadata: stored orientation comes back
    stored, _ = read_frames(sv.path, [0], rotation=0, backend=backend)
    assert stored.shape[1:3] == (240, 320)


def test_moving_square_matches_ground_truth(clips: Clips) -> None:
    sv = clips["mjpg-c.avi"]
    frames, _ = read_frames(sv.path, [0, 15, 29])
    for f, i in zip(frames, (0, 15, 29)):
        assert _mean_rgb(f, sv.box_at(i))[1] > 150
    x_starts = [sv.box_at(i)[0] for i in (0, 15, 29)]
    assert x_starts == sorted(x_starts) and x_starts[0] == 0.0


@pytest.mark.parametrize("key", ["cfr", "h264"])
def test_sparse_read_over_long_clip_seeks_and_stays_exact(
        long_clips: Clips, key: str, grab_counter: list[int]) -> None:
    sv = long_clips[key]
    plan = plan_sampling(probe(sv.path), "describe", SamplingConfig(max_frames=8))
    assert min(b - a for a, b in zip(plan.frame_indices, plan.frame_indices[1:])) > 400
    grab_counter[0] = 0  # the OpenCV cursor's seeking (PyAV's: test_av_reader.py)
    frames, read = read_frames(sv.path, plan.frame_indices, plan.input_wh, backend="opencv")
    assert read == plan.frame_indices
    assert [sv.index_of(f) for f in frames] == list(read)
    assert grab_counter[0] < sv.frame_count / 2  # seeks were used


@pytest.mark.parametrize("key", ["vfr", "ramp"])
def test_vfr_clip_is_read_sequentially(long_clips: Clips, key: str,
                                       grab_counter: list[int]) -> None:
    sv = long_clips[key]
    want = (0, 500, 1000, 2999)
    frames, read = read_frames(sv.path, want, backend="opencv")
    assert [sv.index_of(f) for f in frames] == list(want)
    assert grab_counter[0] >= 2999  # every frame counted: a time-based seek could miss


def test_mixed_gaps_seek_then_walk(long_clips: Clips,
                                   grab_counter: list[int]) -> None:
    sv = long_clips["h264"]
    want = (*range(10), 500, 501, 505, 600, 1200, 1300, 2998, 2999)
    frames, read = read_frames(sv.path, want, size_wh=(48, 32), backend="opencv")
    assert read == want
    assert [sv.index_of(f) for f in frames] == list(want)
    assert grab_counter[0] < 1500


def test_missing_frames_at_end_are_dropped_with_warning(
        clips: Clips, caplog: pytest.LogCaptureFixture) -> None:
    sv = clips["mp4v-c.mp4"]
    with caplog.at_level(logging.WARNING, logger="chord_core.media.video"):
        frames, read = read_frames(sv.path, [10, 29, 30, 45])
    assert read == (10, 29) and len(frames) == 2
    assert any("2 of 4" in r.getMessage() for r in caplog.records)


def test_no_requested_frame_exists(clips: Clips) -> None:
    sv = clips["mp4v-c.mp4"]
    with pytest.raises(VideoError, match=sv.path.name):
        read_frames(sv.path, [100, 200])


def test_undecodable_file(tmp_path: Path) -> None:
    path = make_undecodable(tmp_path / "hollow.avi")
    with pytest.raises(VideoError, match="hollow.avi"):
        read_frames(path, [0, 1])


@pytest.mark.parametrize("indices", [[3, 1], [2, 2], [-1, 4]],
                         ids=["decreasing", "repeat", "negative"])
def test_bad_indices_rejected(clips: Clips, indices: list[int]) -> None:
    with pytest.raises(ValueError):
        read_frames(clips["mp4v-c.mp4"].path, indices)


def test_progress_and_cancel(clips: Clips) -> None:
    sv = clips["mp4v-c.mp4"]
    seen: list[tuple[int, int]] = []
    read_frames(sv.path, [0, 10, 20], on_progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)]

    cancel = threading.Event()

    def stop_after_first(done: int, total: int) -> None:
        cancel.set()

    with pytest.raises(JobCancelled):
        read_frames(sv.path, [0, 10, 20], on_progress=stop_after_first, cancel=cancel)


def test_iter_frames_every_frame_in_order(clips: Clips) -> None:
    sv = clips["rot90"]
    items = list(iter_frames(sv.path, size_wh=(120, 160)))
    assert [i for i, _, _ in items] == list(range(sv.frame_count))
    assert [sv.index_of(f) for _, _, f in items] == list(range(sv.frame_count))
    assert all(f.shape == (160, 120, 3) for _, _, f in items)
    assert [t for _, t, _ in items] == pytest.approx([i / 10 for i in range(sv.frame_count)])


def test_iter_frames_vfr_uses_stream_times(clips: Clips) -> None:
    sv = clips["vfr"]
    times = [t for _, t, _ in iter_frames(sv.path)]
    assert times == pytest.approx(list(sv.timestamps_s), abs=1e-3)
    fixed = [t for _, t, _ in iter_frames(sv.path, fps=8.0)]
    assert fixed == pytest.approx([i / 8 for i in range(sv.frame_count)])
