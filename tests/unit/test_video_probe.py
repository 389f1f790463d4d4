"""video.probe on synthetic clips made at test time: codecs, containers, sizes, rotation,
variable frame rate, truncated and broken files, bounded work on long clips; and the pure
header-vs-decoded reconciliation on lying headers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chord_core.errors import VideoError
from chord_core.media import probe as probing
from chord_core.media.probe import _Decoded, _Header, _reconcile, probe
from chord_core.testing.videos import (
    has_pyav,
    make_text_as_mp4,
    make_truncated,
    make_undecodable,
    make_video,
    make_zero_byte,
)

needs_av = pytest.mark.skipif(not has_pyav(), reason="PyAV (package av) is not installed")


@pytest.fixture
def grab_counter(count_grabs) -> list[int]:
    return count_grabs(probing)


CLIPS = [
    ("clip.mp4", "mp4v", (320, 240), 10.0, "FMP4"),
    ("clip.mov", "mp4v", (320, 240), 10.0, "FMP4"),
    ("clip.avi", "mjpg", (320, 240), 25.0, "MJPG"),
    ("clip.avi", "xvid", (176, 144), 15.0, "FMP4"),
    ("clip.mkv", "xvid", (320, 240), 30.0, "FMP4"),
    ("clip.webm", "vp90", (160, 120), 10.0, "VP90"),
    ("portrait.avi", "mjpg", (180, 320), 30.0, "MJPG"),
    ("clip.mp4", "h264", (320, 240), 30.0, "h264"),
    ("clip.mov", "h264", (640, 360), 24.0, "h264"),
    ("clip.mkv", "h264", (64, 64), 12.0, "h264"),
    ("clip.webm", "vp9", (160, 120), 10.0, "VP90"),
    ("portrait.mp4", "h264", (180, 320), 30.0, "h264"),
    ("ntsc.mp4", "h264", (320, 240), 30000 / 1001, "h264"),
]


@pytest.mark.parametrize("name,codec,wh,fps,fourcc", [
    pytest.param(*c, marks=needs_av if c[1] in ("h264", "vp9") else (),
                 id=f"{c[1]}-{c[0]}-{c[2][0]}x{c[2][1]}@{c[3]:.3g}") for c in CLIPS])
def test_probe_clean_clips(tmp_path: Path, name: str, codec: str, wh: tuple[int, int],
                           fps: float, fourcc: str) -> None:
    sv = make_video(tmp_path / name, duration_s=2.0, fps=fps, size_wh=wh, codec=codec)
    info = probe(sv.path)
    assert info.frame_count == sv.frame_count
    assert info.fps == pytest.approx(fps, rel=1e-3)
    assert info.duration_s == pytest.approx(sv.frame_count / fps, rel=1e-3)
    assert (info.width, info.height) == wh and info.stored_wh == wh
    assert info.codec == fourcc
    assert info.container == Path(name).suffix.lstrip(".")
    assert info.rotation == 0 and not info.variable_fps
    assert info.header_frame_count == sv.frame_count
    assert info.warnings == ()
    assert info.path == str(sv.path)


@needs_av
@pytest.mark.parametrize("name,rotation", [("r.mp4", 90), ("r.mp4", 180), ("r.mp4", 270),
                                           ("r.mov", 90), ("r.mkv", 270), ("r.webm", 90)],
                         ids=lambda v: str(v))
def test_probe_rotation_metadata(tmp_path: Path, name: str, rotation: int) -> None:
    sv = make_video(tmp_path / name, duration_s=1.0, fps=10, size_wh=(320, 240), rotation=rotation)
    info = probe(sv.path)
    assert info.rotation == rotation
    assert info.stored_wh == (320, 240)
    assert info.size_wh == sv.display_wh
    assert info.size_wh == ((240, 320) if rotation in (90, 270) else (320, 240))


@needs_av
def test_probe_vfr_drifting_after_prefix(tmp_path: Path) -> None:
    sv = make_video(tmp_path / "ramp.mkv", duration_s=20, fps=30, size_wh=(96, 64), vfr="ramp")
    info = probe(sv.path)
    ts = sv.timestamps_s
    assert info.variable_fps and info.frame_count == sv.frame_count
    assert info.fps == pytest.approx((len(ts) - 1) / (ts[-1] - ts[0]), rel=0.01)
    assert any("variable frame rate" in w for w in info.warnings)
    assert info.time_of(sv.frame_count - 1) == pytest.approx(ts[-1] - ts[0], abs=1e-3)


@needs_av
@pytest.mark.parametrize("name", ["vfr.mp4", "vfr.mkv", "vfr.webm"])
def test_probe_variable_frame_rate(tmp_path: Path, name: str) -> None:
    sv = make_video(tmp_path / name, duration_s=3.0, fps=10, size_wh=(160, 120), vfr=True)
    info = probe(sv.path)
    ts = sv.timestamps_s
    assert info.variable_fps
    assert info.frame_count == sv.frame_count
    assert info.fps == pytest.approx((len(ts) - 1) / (ts[-1] - ts[0]), rel=0.01)
    assert any("variable frame rate" in w for w in info.warnings)


@needs_av
def test_probe_truncated_faststart_mp4_counts_what_decodes(tmp_path: Path) -> None:
    sv = make_video(tmp_path / "full.mp4", duration_s=20, fps=30, size_wh=(160, 120),
                    faststart=True)
    cut = make_truncated(sv.path, tmp_path / "cut.mp4", 0.5)
    info = probe(cut)
    assert info.header_frame_count == sv.frame_count
    assert sv.frame_count * 0.3 < info.frame_count < sv.frame_count * 0.7
    assert any("truncated" in w for w in info.warnings)


@needs_av
def test_probe_counts_a_remuxed_loop_like_the_decoder(tmp_path: Path) -> None:
    """A segment looped by remuxing (re-timed packets): OpenCV's seek near the end reports
    the frame it was asked for but stands one before it, which used to count one frame too
    many (the last planned frame then never decoded)."""
    import av

    from chord_core.testing.scenes import make_looped_clip

    path, written = make_looped_clip(tmp_path / "loop.mp4", total_s=30, segment_s=10, fps=10,
                                     size_wh=(160, 90), gop_s=2)
    with av.open(str(path)) as container:
        decoded = sum(1 for _ in container.decode(video=0))
    info = probe(path)
    assert info.frame_count == decoded == written == 300
    assert info.duration_s == pytest.approx(30.0)
    assert not any("decode" in w for w in info.warnings), info.warnings


def test_probe_three_hour_clip_is_bounded(tmp_path: Path, grab_counter: list[int]) -> None:
    sv = make_video(tmp_path / "long.mp4", duration_s=3 * 3600, fps=1, size_wh=(64, 48),
                    codec="mp4v", boxes=False)
    info = probe(sv.path)
    assert info.frame_count == 10800 and info.duration_s == pytest.approx(10800)
    assert grab_counter[0] < 200  # a few dozen frames decoded, not 10,800


@needs_av
def test_probe_raw_stream_without_timing(tmp_path: Path) -> None:
    """A bare H.264 stream has no container: no frame count, no timestamps."""
    import av
    import numpy as np

    path = tmp_path / "raw.h264"
    with av.open(str(path), "w", format="h264") as c:
        s = c.add_stream("libx264", rate=10)
        s.width, s.height, s.pix_fmt = 64, 64, "yuv420p"
        for i in range(30):
            img = np.full((64, 64, 3), i * 8, np.uint8)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    info = probe(path)
    assert info.frame_count == 30
    assert info.fps > 0 and info.duration_s == pytest.approx(30 / info.fps)
    assert any("timestamps" in w for w in info.warnings)


BAD = {
    "zero-byte": lambda d: make_zero_byte(d / "empty.mp4"),
    "text-as-mp4": lambda d: make_text_as_mp4(d / "notes.mp4"),
    "truncated-30pct": lambda d: make_truncated(
        make_video(d / "src.mp4", duration_s=2, size_wh=(160, 120)).path, d / "partial.mp4", 0.3),
    "no-decodable-frames": lambda d: make_undecodable(d / "hollow.avi"),
    "missing": lambda d: d / "nowhere.mp4",
    "directory": lambda d: (d / "folder.mp4").mkdir() or d / "folder.mp4",
}


@pytest.mark.parametrize("make", BAD.values(), ids=BAD.keys())
def test_probe_bad_files_raise_video_error(tmp_path: Path, make: Any) -> None:
    path = make(tmp_path)
    with pytest.raises(VideoError) as err:
        probe(path)
    assert path.name in err.value.message
    assert err.value.hint


# -- reconciliation of lying headers (pure) -----------------------------------------------

STEADY_30 = tuple(i * 1000 / 30 for i in range(48))
MKV_30 = tuple(float(round(i * 1000 / 30)) for i in range(48))  # 1 ms time base: 33/34 ms steps
STEADY_480 = tuple(i * 1000 / 480 for i in range(48))  # slow motion: high but real
VFR = tuple(float(sum((50, 100, 150)[k % 3] for k in range(i))) for i in range(48))


RECONCILE = {
    "honest": (_Header(30.0, 300), _Decoded(STEADY_30, 300, True, 299 * 1000 / 30),
               30.0, 300, False, []),
    "ms-rounded-timestamps": (_Header(30.0, 300), _Decoded(MKV_30, 300, True, 9967.0),
                              30.0, 300, False, []),
    "fps-zero": (_Header(0.0, 300), _Decoded(STEADY_30, 300), 30.0, 300, False,
                 ["frame rate (0) is invalid"]),
    "fps-nan": (_Header(float("nan"), 300), _Decoded(STEADY_30, 300), 30.0, 300, False,
                ["frame rate (nan) is invalid"]),
    "fps-absurd": (_Header(90000.0, 300), _Decoded(STEADY_30, 300), 30.0, 300, False,
                   ["frame rate (90000) is invalid"]),
    "fps-480-corroborated": (_Header(480.0, 4800), _Decoded(STEADY_480, 4800), 480.0, 4800,
                             False, []),
    "fps-disagrees": (_Header(25.0, 300), _Decoded(STEADY_30, 300), 30.0, 300, False,
                      ["header says 25.000 fps but frame timestamps show 30.000"]),
    "count-negative": (_Header(30.0, -1), _Decoded(STEADY_30, 120), 30.0, 120, False,
                       ["frame count (-1) is invalid"]),
    "count-too-high": (_Header(30.0, 900), _Decoded(STEADY_30, 450), 30.0, 450, False,
                       ["claims 900 frames but 450 decode (the file may be truncated)"]),
    "vfr": (_Header(30.0, 48), _Decoded(VFR, 48, True, VFR[-1]), 47000 / VFR[-1], 48, True,
            ["variable frame rate"]),
    "no-timestamps": (_Header(25.0, -5), _Decoded((0.0,) * 48, 60), 25.0, 60, False,
                      ["no usable timestamps", "frame count (-5) is invalid"]),
    "nothing-usable": (_Header(0.0, 0), _Decoded((0.0,) * 10, 10), 25.0, 10, False,
                       ["an assumed 25 fps", "frame count (0) is invalid"]),
    "drift-later": (_Header(30.0, 3000), _Decoded(STEADY_30, 3000, True, 3000 * 1000 / 25),
                    2999 / 120, 3000, True,
                    ["drifts later"]),
    "count-limit-header": (_Header(30.0, 99999), _Decoded(STEADY_30, 99999, False, None, 5000),
                           30.0, 99999, False,
                           ["stopped after 5000 frames (probe limit); using the header's 99999"]),
    "count-limit-no-header": (_Header(30.0, 0), _Decoded(STEADY_30, 5000, False, None, 5000),
                              30.0, 5000, False, ["not analysed"]),
}


@pytest.mark.parametrize("header,dec,fps,count,vfr,phrases", RECONCILE.values(),
                         ids=RECONCILE.keys())
def test_reconcile(header: _Header, dec: _Decoded, fps: float, count: int, vfr: bool,
                   phrases: list[str]) -> None:
    tl = _reconcile(header, dec)
    assert tl.fps == pytest.approx(fps, rel=2e-3)
    assert tl.frame_count == count
    assert tl.duration_s == pytest.approx(count / tl.fps)
    assert tl.variable is vfr
    assert len(tl.warnings) == len(phrases)  # one sentence per correction
    for phrase in phrases:
        assert any(phrase in w for w in tl.warnings), (phrase, tl.warnings)


# -- frame counting strategy on a simulated capture ----------------------------------------

class FakeCapture:
    """A stream of ``n`` decodable frames at ``fps`` that behaves like OpenCV's FFmpeg
    capture: a seek past the end lands on the end; grab() fails there."""

    def __init__(self, n: int, fps: float = 30.0, wh: tuple[int, int] = (64, 48)) -> None:
        self.n, self.step, self.wh = n, 1000.0 / fps, wh
        self.pos, self.current, self.grabs = 0, -1, 0

    def grab(self) -> bool:
        self.grabs += 1
        if self.pos >= self.n:
            return False
        self.current, self.pos = self.pos, self.pos + 1
        return True

    def retrieve(self) -> tuple[bool, Any]:
        import numpy as np

        return True, np.zeros((self.wh[1], self.wh[0], 3), np.uint8)

    def get(self, prop: int) -> float:
        import cv2

        if prop == cv2.CAP_PROP_POS_FRAMES:
            return float(self.pos)
        if prop == cv2.CAP_PROP_POS_MSEC:
            return self.current * self.step
        raise AssertionError(prop)

    def set(self, prop: int, value: float) -> bool:
        import cv2

        assert prop == cv2.CAP_PROP_POS_FRAMES
        self.pos = min(int(value), self.n)
        return True


COUNTING = {
    # name: (frames that decode, header fps, header count, frame size, expected count, exact,
    #        max grabs)
    "honest-long": (100_000, 30.0, 100_000, (64, 48), 100_000, True, 100),
    "truncated": (40_000, 30.0, 100_000, (64, 48), 40_000, True, 100),
    "header-undercounts": (5_000, 30.0, 1_000, (64, 48), 5_000, True, 5_100),
    "count-missing": (3_000, 30.0, -1, (64, 48), 3_000, True, 3_100),
    "count-missing-too-long": (10**6, 30.0, 0, (3840, 2160), 2_000, False, 2_100),
    "unseekable-too-long": (10**6, 25.0, 10**6, (3840, 2160), 10**6, False, 2_100),
    "fps-mismatch": (1_000, 25.0, 1_000, (64, 48), 1_000, True, 1_100),
    "short": (30, 30.0, 30, (64, 48), 30, True, 40),
}


@pytest.mark.parametrize("frames,fps,claimed,wh,count,exact,max_grabs", COUNTING.values(),
                         ids=COUNTING.keys())
def test_count_frames_strategy(frames: int, fps: float, claimed: int, wh: tuple[int, int],
                               count: int, exact: bool, max_grabs: int) -> None:
    cap = FakeCapture(frames, fps=30.0, wh=wh)
    shape, times, ended = probing._decode_prefix(cap)
    dec = probing._count_frames(cap, _Header(fps, claimed), times, ended, shape)
    assert (dec.frame_count, dec.exact) == (count, exact)
    assert cap.grabs <= max_grabs
