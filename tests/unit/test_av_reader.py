"""The PyAV route of read_frames (chord_core.media.av_reader): the same frame indices as OpenCV's
sequential count on every kind of clip (index band read from the picture, pixels close to
OpenCV's), timestamp mode only where it is provable (B-frame reordering, a timestamp jump, VFR,
allow_seek=False), the work it saves, cancellation, and the fallbacks to OpenCV."""

from __future__ import annotations

import logging
import threading
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from chord_core.errors import JobCancelled, VideoError
from chord_core.media import av_reader, video
from chord_core.media.av_reader import AvStats, read_frames_av
from chord_core.media.video import read_frames
from chord_core.testing.videos import (
    SyntheticVideo,
    has_pyav,
    make_video,
    read_frame_index,
)

pytestmark = pytest.mark.skipif(not has_pyav(), reason="PyAV (package av) is not installed")

SHORT = (0, 1, 2, 5, 13, 14, 29)  # 30-frame clips
LONG = (*range(10), 150, 151, 200, 239)  # 240-frame clips: a gap of 140 frames


def _background(size_wh: tuple[int, int]) -> np.ndarray:
    w, h = size_wh
    yy, xx = np.mgrid[0:h, 0:w]
    base = 60 + 100 * (xx / max(1, w - 1) + yy / max(1, h - 1)) / 2
    noise = np.random.default_rng(1).normal(0, 6, (h, w, 1))
    return np.clip(base[..., None] + noise + [10, 0, -10], 30, 200).astype(np.uint8)


def write_h264(path: Path, count: int, fps: int, size_wh: tuple[int, int], *,
               gop: int | None = None, pts_of: Callable[[int], int] | None = None,
               codec: str = "libx264") -> Path:
    """An H.264 clip from libx264 at its default preset (B-frames: decode order ≠
    presentation order), each frame showing its index band; ``pts_of`` sets timestamps in
    units of 1/fps. ``codec="libx265"``: HEVC instead."""
    import av

    from chord_core.testing.videos import render_frame

    bg = _background(size_wh)
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = size_wh
        stream.pix_fmt = "yuv420p"
        stream.options = ({"crf": "16", **({"g": str(gop)} if gop else {})}
                          if codec == "libx264" else {"x265-params": "log-level=error"})
        for i in range(count):
            frame = av.VideoFrame.from_ndarray(render_frame(i, count, size_wh, bg), "rgb24")
            if pts_of is not None:
                frame.pts, frame.time_base = pts_of(i), Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _hevc(path: Path) -> SyntheticVideo | None:
    import av

    try:
        return _clip(write_h264(path, 30, 15, (160, 120), codec="libx265"), 30)
    except (av.error.FFmpegError, ValueError):  # a PyAV build without libx265
        return None


def _clip(path: Path, count: int, rotation: int = 0) -> SyntheticVideo:
    return SyntheticVideo(path=path, fps=0.0, frame_count=count, size_wh=(0, 0), codec="h264",
                          rotation=rotation)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SyntheticVideo]:
    d = tmp_path_factory.mktemp("avclips")
    small = dict(duration_s=2, fps=15, size_wh=(160, 120))
    return {
        "h264-bframes": _clip(write_h264(d / "bf.mp4", 30, 15, (160, 120)), 30),
        "h264-mkv": make_video(d / "c.mkv", **small),
        "mp4v": make_video(d / "c.mp4", codec="mp4v", **small),
        "mjpg-avi": make_video(d / "c.avi", codec="mjpg", **small),
        "vp9-webm": make_video(d / "c.webm", **small),
        "hevc": _hevc(d / "hevc.mp4"),
        "rot90": make_video(d / "rot90.mp4", rotation=90, **small),
        "vfr": make_video(d / "vfr.mkv", vfr=True, **small),
        "gop24": _clip(write_h264(d / "gop.mp4", 240, 120, (96, 64), gop=24), 240),
        "vfr-ramp-mp4": make_video(d / "ramp.mp4", duration_s=2, fps=120, size_wh=(96, 64),
                                   vfr="ramp"),
        # steady for 120 frames, then the timestamps jump 50 frame intervals ahead
        "pts-jump": _clip(write_h264(d / "jump.mp4", 240, 120, (96, 64), gop=24,
                                     pts_of=lambda i: i if i < 120 else i + 50), 240),
    }


def _indices_for(sv: SyntheticVideo) -> tuple[int, ...]:
    return LONG if sv.frame_count == 240 else SHORT


def _opencv_counted(sv: SyntheticVideo, want: tuple[int, ...],
                    size_wh: tuple[int, int] | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """The definition of index k: OpenCV's k-th decoded frame, every frame counted."""
    return read_frames(sv.path, want, size_wh, backend="opencv", allow_seek=False)


KINDS = ["h264-bframes", "h264-mkv", "mp4v", "mjpg-avi", "vp9-webm", "hevc", "rot90", "vfr",
         "gop24", "vfr-ramp-mp4", "pts-jump"]


def _get(clips: dict[str, SyntheticVideo | None], kind: str) -> SyntheticVideo:
    if clips[kind] is None:
        pytest.skip(f"this PyAV build cannot write the {kind} clip")
    return clips[kind]


@pytest.mark.parametrize("size", [(80, 60), None], ids=["resized", "native"])
@pytest.mark.parametrize("kind", KINDS)
def test_same_frames_as_opencv(clips: dict[str, SyntheticVideo], kind: str,
                               size: tuple[int, int] | None) -> None:
    sv = _get(clips, kind)
    want = _indices_for(sv)
    if size is not None and sv.rotation in (90, 270):
        size = size[::-1]
    stats = AvStats()
    ours, read = read_frames_av(sv.path, want, size, stats=stats)
    ref, ref_read = _opencv_counted(sv, want, size)
    assert tuple(ref_read) == want and len(ours) == len(want) and read > want[-1]
    assert [read_frame_index(f, sv.rotation) for f in ours] == list(want)
    assert [read_frame_index(f, sv.rotation) for f in ref] == list(want)
    assert all(a.shape == b.shape for a, b in zip(ours, ref))
    diffs = [float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())
             for a, b in zip(ours, ref)]
    assert max(diffs) < 4, diffs
    assert stats.decoded > 0


def test_bframes_clip_reorders(clips: dict[str, SyntheticVideo]) -> None:
    """The H.264 clips really have B-frames: packets' pts are not in decode order."""
    import av

    with av.open(str(clips["h264-bframes"].path)) as c:
        pts = [p.pts for p in c.demux(video=0) if p.size]
    assert pts != sorted(pts) and len(pts) == 30


def test_sparse_read_skips_decoding(clips: dict[str, SyntheticVideo]) -> None:
    sv = clips["gop24"]
    stats = AvStats()
    frames, _ = read_frames_av(sv.path, (0, 8, 9, 120, 239), (48, 32), stats=stats)
    assert [read_frame_index(f) for f in frames] == [0, 8, 9, 120, 239]
    assert stats.timestamp_mode and stats.restarts == 0
    assert stats.flushes >= 2  # restarted from a keyframe before 120 and before 239
    assert stats.fed < stats.packets / 2


def test_dense_read_skips_non_reference_frames(clips: dict[str, SyntheticVideo]) -> None:
    sv = clips["gop24"]
    want = tuple(range(0, 240, 6))
    stats, counted = AvStats(), AvStats()
    fast, _ = read_frames_av(sv.path, want, (48, 32), stats=stats)
    slow, _ = read_frames_av(sv.path, want, (48, 32), allow_seek=False, stats=counted)
    assert [read_frame_index(f) for f in fast] == list(want)
    assert stats.timestamp_mode and not counted.timestamp_mode
    assert counted.decoded == want[-1] + 1 and stats.decoded < 0.8 * counted.decoded
    for a, b in zip(fast, slow):  # skipping frames nobody refers to changes no pixel
        np.testing.assert_array_equal(a, b)


def test_hevc_decodes_every_frame_in_timestamp_mode(clips: dict[str, SyntheticVideo]) -> None:
    """HEVC's "sub-layer non-reference" frames may be referenced by higher temporal layers:
    they are decoded, not skipped."""
    sv = _get(clips, "hevc")
    stats = AvStats()
    frames, _ = read_frames_av(sv.path, (0, 10, 20, 29), (48, 32), stats=stats)
    assert [read_frame_index(f) for f in frames] == [0, 10, 20, 29]
    assert stats.timestamp_mode and stats.decoded == 30


@pytest.mark.parametrize("kind,allow_seek", [
    ("pts-jump", True), ("vfr-ramp-mp4", True), ("vfr", True), ("gop24", False),
], ids=["pts-jump", "vfr-ramp-mp4", "vfr-mkv", "allow-seek-off"])
def test_timestamps_used_only_when_proven(clips: dict[str, SyntheticVideo], kind: str,
                                          allow_seek: bool) -> None:
    sv = clips[kind]
    stats = AvStats()
    want = (0, 5, 200, 239) if sv.frame_count == 240 else (0, 5, 29)
    frames, _ = read_frames_av(sv.path, want, (48, 32), allow_seek=allow_seek, stats=stats)
    assert [read_frame_index(f) for f in frames] == list(want)
    assert not stats.timestamp_mode  # never trusted, or dropped by a restart
    if kind == "pts-jump":
        assert stats.restarts == 1  # the census saw the jump before frame 200 was placed


def test_rotation_metadata_and_override(clips: dict[str, SyntheticVideo]) -> None:
    sv = clips["rot90"]
    upright, _ = read_frames_av(sv.path, (0, 7), (60, 80))
    assert upright[0].shape == (80, 60, 3)
    assert [sv.index_of(f) for f in upright] == [0, 7]
    stored, _ = read_frames_av(sv.path, (7,), None, rotation=0)
    assert stored[0].shape == (120, 160, 3) and read_frame_index(stored[0]) == 7


def test_frames_missing_at_end(clips: dict[str, SyntheticVideo]) -> None:
    sv = clips["h264-bframes"]
    frames, seen = read_frames_av(sv.path, (28, 29, 30, 40), (32, 24))
    assert len(frames) == 2 and seen == 30


@pytest.mark.parametrize("when", ["before", "after-first", "inside-a-gap"])
def test_cancel(clips: dict[str, SyntheticVideo], when: str,
                monkeypatch: pytest.MonkeyPatch) -> None:
    cancel, stats = threading.Event(), AvStats()
    if when == "before":
        cancel.set()
    if when == "inside-a-gap":  # set while packets are demuxed between two wanted frames
        real = av_reader._AvCursor._route

        def route(self: Any, packet: Any, index: int | None) -> None:
            cancel.set()
            real(self, packet, index)

        monkeypatch.setattr(av_reader._AvCursor, "_route", route)
    with pytest.raises(JobCancelled):
        read_frames_av(clips["gop24"].path, (0, 239), (48, 32), cancel=cancel, stats=stats,
                       on_progress=None if when == "inside-a-gap" else
                       lambda done, total: cancel.set())
    assert stats.packets < 200  # stopped early, not at the end of the clip


def _fail(exc: Exception) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return fail


@pytest.mark.parametrize("patch", ["open", "decode", "missing"])
def test_falls_back_to_opencv(clips: dict[str, SyntheticVideo], patch: str,
                              monkeypatch: pytest.MonkeyPatch,
                              caplog: pytest.LogCaptureFixture) -> None:
    import av

    sv = clips["gop24"]
    if patch == "open":
        monkeypatch.setattr(av, "open", _fail(av.error.InvalidDataError(1094995529, "bad")))
    elif patch == "decode":  # fails after the first wanted frames were converted
        real = av_reader._AvCursor._feed

        def feed(self: Any, packet: Any, index: int | None) -> None:
            if self.stats.fed > 40:
                raise av.error.InvalidDataError(1094995529, "corrupt packet")
            real(self, packet, index)

        monkeypatch.setattr(av_reader._AvCursor, "_feed", feed)
    else:
        monkeypatch.setitem(__import__("sys").modules, "av", None)
        monkeypatch.setattr(video, "_AV_MISSING_SAID", False)
    seen: list[int] = []
    with caplog.at_level(logging.INFO, logger="chord_core.media.video"):
        frames, read = read_frames(sv.path, LONG, (48, 32),
                                   on_progress=lambda done, total: seen.append(done))
    ref, _ = read_frames(sv.path, LONG, (48, 32), backend="opencv")
    np.testing.assert_array_equal(frames, ref)
    assert read == LONG and seen == list(range(1, len(LONG) + 1))  # never backwards
    assert any("OpenCV" in r.getMessage() for r in caplog.records)
    if patch == "missing":  # said once per process, not on every read
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="chord_core.media.video"):
            read_frames(sv.path, (0, 1), (48, 32))
        assert not any("not installed" in r.getMessage() for r in caplog.records)


def test_forced_pyav_does_not_fall_back(clips: dict[str, SyntheticVideo],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import av

    monkeypatch.setattr(av, "open", _fail(av.error.InvalidDataError(1094995529, "bad")))
    with pytest.raises(VideoError, match="PyAV"):
        read_frames(clips["gop24"].path, (0, 1), backend="pyav")


def test_early_end_is_checked_with_opencv(clips: dict[str, SyntheticVideo],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """PyAV stopping before a frame OpenCV can decode → OpenCV's frames are returned."""
    sv = clips["gop24"]
    real = av_reader.read_frames_av

    def short(p: Path, wanted: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
        frames, _ = real(p, wanted[:3], *args, **kwargs)
        return frames, wanted[2] + 1

    monkeypatch.setattr(av_reader, "read_frames_av", short)
    frames, read = read_frames(sv.path, LONG, (48, 32))
    assert read == LONG and [read_frame_index(f) for f in frames] == list(LONG)


def test_default_backend_is_pyav(clips: dict[str, SyntheticVideo],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = video._read_opencv
    monkeypatch.setattr(video, "_read_opencv", lambda *a, **k: calls.append("cv") or real(*a))
    frames, _ = read_frames(clips["mp4v"].path, SHORT, (80, 60))
    assert calls == [] and [read_frame_index(f) for f in frames] == list(SHORT)


def test_decoded_times_out_of_order_are_not_handed_on(tmp_path, caplog) -> None:
    """Packed B-frames in AVI: PyAV's pts come out 1, 3, 2 … for frames in display order.
    A sampled subset can look increasing (frames 0, 3, 6 …), so the reader judges the order
    over every decoded frame, and then hands on no times (NaN: the probe's stay)."""
    import math

    from chord_core.media.av_reader import read_frames_av
    from chord_core.testing.odd_files import make_packed_bframes_avi
    from chord_core.testing.videos import make_video, read_frame_index

    sv = make_packed_bframes_avi(tmp_path / "packed.avi", count=24)
    times: list[float] = []
    with caplog.at_level("WARNING"):
        frames, _ = read_frames_av(sv.path, (0, 3, 6, 9), times_s=times)
    assert [read_frame_index(f) for f in frames] == [0, 3, 6, 9]
    assert len(times) == 4 and all(math.isnan(t) for t in times)
    assert "decoded frame times are not increasing (pts 2 after 3 at frame 2" in caplog.text
    plain = make_video(tmp_path / "plain.mp4", duration_s=1.0, fps=10.0, size_wh=(64, 48))
    times = []
    read_frames_av(plain.path, (0, 3, 6, 9), times_s=times)
    assert times == pytest.approx([0.0, 0.3, 0.6, 0.9], abs=1e-3)
