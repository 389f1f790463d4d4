"""Browser previews: any file Chord can analyse gets an H.264 MP4 that keeps every frame's
presentation time (MPEG-4 part 2 AVIs as OpenCV's samples have them, MJPEG, VFR MKV, odd
sizes), and a failed preview is remembered instead of retried and logged on every rerun."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest

from chord_core.testing.videos import make_video
from chord_core.types import VideoInfo
from chord_ui.clip_view import poster_indices
from chord_ui.previews import PREVIEW_TIME_BASE, _preview_times, failed_marker, make_preview


def _mpeg4_avi(path: Path, *, rate: Fraction, size_wh: tuple[int, int], sar: Fraction | None,
               frames: int = 36) -> Path:
    """An MPEG-4 part 2 AVI with B-frames (the Megamind.avi kind), written by PyAV."""
    with av.open(str(path), "w") as out:
        s = out.add_stream("mpeg4", rate=rate)
        s.width, s.height, s.pix_fmt = *size_wh, "yuv420p"
        s.max_b_frames = 2
        if sar is not None:
            s.codec_context.sample_aspect_ratio = sar
        w, h = size_wh
        for k in range(frames):
            img = np.full((h, w, 3), 20 + 4 * k, np.uint8)
            img[h // 3:h // 2, 8 * k % w:8 * k % w + 24] = (230, 30, 30)
            for packet in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in s.encode():
            out.mux(packet)
    return path


def _times(path: Path) -> list[float]:
    with av.open(str(path)) as c:
        v = c.streams.video[0]
        ts = [float(f.pts * v.time_base) for f in c.decode(v) if f.pts is not None]
    return [t - ts[0] for t in ts]


@pytest.mark.parametrize("make", [
    lambda p: _mpeg4_avi(p / "m.avi", rate=Fraction(24000, 1001), size_wh=(720, 528), sar=None),
    lambda p: _mpeg4_avi(p / "s.avi", rate=Fraction(25), size_wh=(352, 288), sar=Fraction(12, 11)),
    lambda p: make_video(p / "x.avi", duration_s=1.5, fps=10.0, size_wh=(160, 120),
                         codec="xvid").path,
    lambda p: make_video(p / "j.avi", duration_s=1.5, fps=10.0, size_wh=(160, 120)).path,
    lambda p: make_video(p / "v.mkv", duration_s=2.0, fps=10.0, size_wh=(160, 120), vfr=True).path,
], ids=["mpeg4-avi-bframes-23.976", "mpeg4-avi-anamorphic", "opencv-xvid-avi", "mjpeg-avi",
        "vfr-mkv"])
def test_preview_plays_and_keeps_frame_times(tmp_path: Path, make) -> None:
    src = make(tmp_path)
    out = make_preview(str(src), tmp_path / "previews" / "key.mp4",
                       roots=[str(tmp_path.resolve())])
    with av.open(str(out)) as c:
        v = c.streams.video[0]
        assert (c.format.name.split(",")[0], v.codec_context.name) == ("mov", "h264")
        assert v.codec_context.width <= 960 and v.codec_context.width % 2 == 0
    want, got = _times(src), _times(out)
    assert len(got) == len(want) > 0
    assert np.allclose(got, want, atol=1e-3), (got[:6], want[:6])
    assert (out.stat().st_mode & 0o777) == 0o600 and not failed_marker(out).exists()


def test_packed_bframes_avi_keeps_every_frame_at_its_time(tmp_path: Path) -> None:
    """Megamind.avi's kind: packed B-frames decode with their pts out of order (1, 3, 2 …);
    the preview shows frame k at k / fps, as AVI stores it and the analysis reads it (it
    used the decoded pts: every third frame was one frame off)."""
    from chord_core.testing.odd_files import make_packed_bframes_avi

    src = make_packed_bframes_avi(tmp_path / "packed.avi", count=48, fps=24)
    with av.open(str(src.path)) as c:
        decoded = [f.pts for f in c.decode(c.streams.video[0])]
    assert decoded != sorted(decoded)  # the trap is there
    out = make_preview(str(src.path), tmp_path / "previews" / "packed.mp4",
                       roots=[str(tmp_path.resolve())])
    got = _times(out)
    assert len(got) == 48
    assert np.allclose(got, [k / 24 for k in range(48)], atol=1e-3), got[:6]


def test_missing_and_repeated_times_still_increase() -> None:
    tb = Fraction(1, 24)
    frames = [SimpleNamespace(pts=p) for p in (1, 2, None, 4, 4, 3, 6)]
    ticks = [tick for _, tick in _preview_times(frames, tb, Fraction(24))]
    step = round(Fraction(1, 24) / PREVIEW_TIME_BASE)
    assert ticks[:2] == [0, step] and ticks[2] == 2 * step and ticks[3] == 3 * step
    assert all(b > a for a, b in zip(ticks, ticks[1:]))  # strictly increasing
    assert ticks[-1] == 5 * step  # a later frame keeps its own time


def test_a_failed_preview_is_remembered(tmp_path: Path) -> None:
    bad = tmp_path / "broken.avi"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00AVI LIST" + bytes(200))
    out = tmp_path / "previews" / "bad.mp4"
    with pytest.raises(Exception):  # noqa: B017 — PyAV's own error, whatever its class
        make_preview(str(bad), out, roots=[str(tmp_path.resolve())])
    assert not out.exists() and not out.with_name("bad.part.mp4").exists()
    assert failed_marker(out).read_text().strip()


def test_a_preview_of_an_earlier_version_is_made_again(tmp_path: Path) -> None:
    """A preview made by an earlier Chord (packed-B-frame AVIs had frames 41.7 ms off) is
    not served: the name carries PREVIEW_VERSION, and the old files of that clip go."""
    from chord_ui.previews import PREVIEW_VERSION, drop_stale, preview_file

    out = preview_file("path-0123abcd", tmp_path)
    assert out.name == f"path-0123abcd.v{PREVIEW_VERSION}.mp4"
    out.parent.mkdir(parents=True)
    old = [out.parent / n for n in ("path-0123abcd.mp4", "path-0123abcd.failed",
                                    "path-0123abcd.v1.mp4")]
    kept = [out.parent / n for n in (f"path-0123abcd.v{PREVIEW_VERSION}.part.mp4",
                                     "path-0123abcdef.mp4", "other.mp4")]
    for f in old + kept:
        f.write_bytes(b"x")
    assert drop_stale(out) == 3
    assert not any(f.exists() for f in old) and all(f.exists() for f in kept)


def test_the_page_serves_a_new_preview_and_drops_the_old_one(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """``playable_path`` (what the Analyze player shows) for an AVI under the media roots:
    the preview of this version is made and served, the earlier version's file is gone."""
    from chord_core.media.probe import probe
    from chord_ui.clip_view import playable_path
    from chord_ui.previews import preview_file
    from chord_ui.uploads import ClipSource

    media = tmp_path / "media"
    media.mkdir()
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    clip = make_video(media / "cam.avi", duration_s=1.0, fps=10.0, size_wh=(64, 48),
                      codec="mjpg").path
    old = preview_file("path-feedc0de").with_name("path-feedc0de.mp4")
    old.parent.mkdir(parents=True)
    old.write_bytes(b"an earlier Chord's preview")
    source = ClipSource(str(clip), "cam.avi", "path-feedc0de", uploaded=False)
    served = playable_path(source, probe(clip))
    assert served == str(preview_file("path-feedc0de")) and Path(served).stat().st_size > 0
    assert not old.exists()


@pytest.mark.parametrize(("fps", "frames", "want"), [
    (25.0, 1000, [0, 25, 75, 250]),
    (25.0, 30, [0, 25, 29]),
    (0.0, 5, [0, 4]),
    (24.0, 1, [0]),
], ids=["long", "short", "no-fps", "one-frame"])
def test_poster_candidates_skip_a_black_start(fps: float, frames: int, want: list[int]) -> None:
    info = VideoInfo(path="x.avi", duration_s=frames / (fps or 25), fps=fps, frame_count=frames,
                     width=64, height=48, codec="mpeg4")
    assert poster_indices(info) == want


def test_the_opencv_fallback_keeps_the_probes_times(tmp_path: Path) -> None:
    """For files PyAV cannot transcode: the frames as Chord's OpenCV reader gives them, at
    the probe's frame times (what detections carry)."""
    from chord_core.analysis.render import h264_encoder
    from chord_core.media.probe import probe
    from chord_ui.previews import _transcode_opencv

    src = _mpeg4_avi(tmp_path / "m.avi", rate=Fraction(24000, 1001), size_wh=(320, 240),
                     sar=None, frames=24)
    info = probe(str(src))
    out = tmp_path / "o.mp4"
    assert _transcode_opencv(str(src), out, h264_encoder(), 960, info) == info.frame_count
    got = _times(out)
    assert np.allclose(got, [info.time_of(i) for i in range(len(got))], atol=1e-3)


def test_a_clip_swapped_for_a_link_outside_the_roots_gets_no_preview(tmp_path: Path) -> None:
    """The clip was a file under the roots when it was shown; then replaced by a symlink
    to a file elsewhere: the preview is refused (the outside file is never transcoded)."""
    from chord_core.errors import InputError

    root, outside = tmp_path / "media", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    secret = make_video(outside / "secret.avi", duration_s=1.0, fps=10.0,
                        size_wh=(160, 120)).path
    clip = root / "clip.avi"
    clip.symlink_to(secret)
    out = tmp_path / "previews" / "swap.mp4"
    with pytest.raises(InputError, match="not a file under the media roots"):
        make_preview(str(clip), out, roots=[str(root.resolve())])
    assert not out.exists()


def test_a_variable_frame_rate_avi_keeps_its_times_in_the_preview(tmp_path) -> None:
    """Frames skipped in a VFR AVI's index (a 10 s clip of 10 frames at a nominal 15 fps)
    keep their gaps: the preview's last frame is at 9.93 s, not at 9/15 s."""
    from fractions import Fraction

    import av

    from chord_ui.previews import make_preview

    pts = [0, 1, 2, 30, 31, 60, 90, 91, 120, 149]
    src = tmp_path / "vfr.avi"
    with av.open(str(src), "w") as out:
        s = out.add_stream("mjpeg", rate=15)
        s.width, s.height, s.pix_fmt = 160, 120, "yuvj420p"
        s.codec_context.time_base = Fraction(1, 15)
        for i, p in enumerate(pts):
            f = av.VideoFrame.from_ndarray(np.full((120, 160, 3), i * 20, np.uint8),
                                           format="rgb24").reformat(format="yuvj420p")
            f.pts, f.time_base = p, Fraction(1, 15)
            for pk in s.encode(f):
                out.mux(pk)
        for pk in s.encode(None):
            out.mux(pk)
    prev = make_preview(str(src), tmp_path / "prev.mp4", roots=[str(tmp_path)])
    with av.open(str(prev)) as c:
        times = sorted(float(f.time) for f in c.decode(video=0))
    assert len(times) == len(pts)
    assert np.allclose(times, [p / 15 for p in pts], atol=0.01), times


def test_an_avi_index_times_are_read_while_the_file_is_open(tmp_path: Path) -> None:
    """OpenCV's Megamind.avi kind: the index times must be the packets' frame numbers in the
    stream's time base (read while the container is open; read after it closed, the time base
    was garbage and the preview's muxer refused the times: a black player in the app)."""
    from chord_core.testing.odd_files import make_packed_bframes_avi
    from chord_ui.previews import _avi_times

    clip = tmp_path / "packed.avi"
    make_packed_bframes_avi(clip, count=48, fps=24, size_wh=(160, 120))
    times = _avi_times(str(clip))
    assert len(times) == 48
    assert times == sorted(times) and times[0] == 0
    assert abs(float(times[-1]) - 47 / 24) < 1e-6


MEGAMIND = Path("/usr/share/doc/opencv-doc/examples/data/Megamind.avi")


@pytest.mark.skipif(not MEGAMIND.exists(), reason="OpenCV's Megamind.avi (Debian opencv-doc) absent")
def test_opencv_megamind_avi_gets_a_preview_of_its_length(tmp_path: Path) -> None:
    """The real file whose preview failed (its index times were read after close)."""
    import av

    from chord_ui.previews import make_preview

    clip = tmp_path / "Megamind.avi"
    clip.write_bytes(MEGAMIND.read_bytes())
    out = make_preview(str(clip), tmp_path / "p" / "p.mp4", roots=[str(tmp_path)])
    with av.open(str(out)) as c:
        frames = c.streams.video[0].frames
        seconds = float(c.duration / av.time_base)
    assert frames == 270 and abs(seconds - 270 / (2997 / 125)) < 0.1
