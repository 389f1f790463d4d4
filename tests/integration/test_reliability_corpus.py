"""The reliability corpus (issue 11): every kind of file a user or an attacker may hand Chord,
made here with PyAV / OpenCV, through the real CLI.

* valid files (containers, codecs, rotation, variable rate, timestamp jumps, odd names):
  exit 0, no ``error:`` line, and every sampled frame's time equals the container's
  presentation time, read independently with PyAV (within ``TIME_TOLERANCE_S``); for the
  synthetic clips the frame read at each sampled index is the one shown at that time;
* refused files (text, images, pseudo-demuxer input, pipes, devices, folders, loops,
  truncated, audio only): exit 2, the first stderr line is ``error: …`` naming the problem,
  the second ``hint: …``, nothing else;
* bad options: exit 2 before any model is loaded.

Most cases call ``chord_core.__main__.main`` in-process; a few run ``python -m chord_core``
as a subprocess to prove that FFmpeg/OpenCV print nothing of their own before ``error:``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from chord_core.__main__ import main
from chord_core.media.frame_times import TIME_TOLERANCE_S
from chord_core.media.video import read_frames, read_frames_timed
from chord_core.testing.odd_files import (
    container_times,
    make_ansi_art,
    make_armored_text,
    make_audio_only,
    make_jpeg,
    make_packed_bframes_avi,
    make_png,
    make_restarting_ts,
    make_timed_video,
)
from chord_core.testing.videos import (
    has_pyav,
    make_text_as_mp4,
    make_truncated,
    make_undecodable,
    make_video,
    make_zero_byte,
)

pytestmark = pytest.mark.skipif(not has_pyav(), reason="PyAV (package av) is not installed")

ROOT = Path(__file__).resolve().parents[2]
TOL = TIME_TOLERANCE_S + 1e-6
CFR = [i / 25 for i in range(50)]


def _clip(name: str, **kw: Any) -> Callable[[Path], Any]:
    return lambda d: make_video(d / name, size_wh=(96, 64), **kw)


def _timed(name: str, times: list[float], **kw: Any) -> Callable[[Path], Any]:
    return lambda d: make_timed_video(d / name, times, **kw)


def _truncated_faststart(d: Path) -> Path:
    sv = make_video(d / "full.mp4", duration_s=8, fps=25, size_wh=(96, 64), faststart=True)
    return make_truncated(sv.path, d / "cut-faststart.mp4", 0.5)


# id → (maker, phrase a warning must contain, or None for a clean file)
GOOD: dict[str, tuple[Callable[[Path], Any], str | None]] = {
    "mp4-h264-bframes": (_clip("b.mp4", duration_s=2, fps=25), None),
    "mkv-h264": (_clip("c.mkv", duration_s=2, fps=24), None),
    "webm-vp9": (_clip("c.webm", duration_s=2, fps=10), None),
    "avi-mjpeg": (_clip("c.avi", duration_s=2, fps=15, codec="mjpg"), None),
    "mov-h264": (_clip("c.mov", duration_s=2, fps=30), None),
    "mp4-mpeg4-part2": (_clip("v.mp4", duration_s=2, fps=12, codec="mp4v"), None),
    "mkv-xvid": (_clip("x.mkv", duration_s=2, fps=12, codec="xvid"), None),
    "mp4-hevc": (_timed("h.mp4", CFR[:30], codec="libx265"), None),
    "mp4-rotated-90": (_clip("r.mp4", duration_s=1, fps=10, rotation=90), None),
    "mov-rotated-270": (_clip("r.mov", duration_s=1, fps=10, rotation=270), None),
    "webm-rotated-180": (_clip("r.webm", duration_s=1, fps=10, rotation=180), None),
    "mp4-vfr-cycle": (_clip("vfr.mp4", duration_s=3, fps=10, vfr=True), "variable frame rate"),
    "mkv-vfr-ramp": (_clip("ramp.mkv", duration_s=3.8, fps=10, vfr="ramp"),
                     "variable frame rate"),
    "mp4-jump-forward-100s": (_timed("jump.mp4", CFR[:25] + [101 + t for t in CFR[:25]]),
                              "jump by +100.0 s after frame 24"),
    "mkv-jump-forward-3s": (_timed("jump.mkv", CFR[:25] + [4 + t for t in CFR[:25]]),
                            "jump by +3.0 s after frame 24"),
    "mkv-huge-header-fps": (_timed("huge.mkv", CFR, header_fps=90000), "the header says"),
    "mp4-one-frame": (_clip("one.mp4", duration_s=0.1, fps=10), None),
    "mkv-two-frames": (_clip("two.mkv", duration_s=0.2, fps=10), None),
    "mp4-faststart": (_clip("fast.mp4", duration_s=2, fps=25, faststart=True), None),
    "mp4-truncated-faststart": (_truncated_faststart, "truncated"),
    "mkv-ntsc-ms-clock": (_clip("ntsc.mkv", duration_s=3, fps=30000 / 1001), None),
    "name-with-spaces": (_clip("my holiday clip.mp4", duration_s=1, fps=10), None),
    "name-unicode": (_clip("ünïcødé 視頻.mkv", duration_s=1, fps=10), None),
    "name-leading-dash": (_clip("-dash.mp4", duration_s=1, fps=10), None),
    "name-with-newline": (_clip("new\nline.mp4", duration_s=1, fps=10), None),
}


def _path_of(made: Any) -> Path:
    return made.path if hasattr(made, "path") else Path(made)


def _probe(path: Path, out: Path, capsys: pytest.CaptureFixture) -> tuple[int, dict, str]:
    rc = main(["probe", "--json", str(out), "--", str(path)])
    err = capsys.readouterr().err
    return rc, (json.loads(out.read_text()) if rc == 0 else {}), err


@pytest.mark.parametrize("case", GOOD, ids=list(GOOD))
def test_valid_file_exact_frame_times(case: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture) -> None:
    make, phrase = GOOD[case]
    made = make(tmp_path)
    path = _path_of(made)
    rc, doc, err = _probe(path, tmp_path / "probe.json", capsys)
    assert rc == 0, err
    assert "error:" not in err and "Traceback" not in err
    video = doc["video"]
    warnings = video["warnings"]
    if phrase is None:
        assert warnings == [], warnings
    else:
        assert any(phrase in w for w in warnings), warnings
    truth = container_times(path)
    assert video["frame_count"] <= len(truth)
    for plan in doc["plans"].values():
        for index, t in zip(plan["frame_indices"], plan["timestamps_s"]):
            assert abs(t - truth[index]) <= TOL, (index, t, truth[index])
    if getattr(made, "timestamps_s", ()) and case != "mp4-truncated-faststart":
        _check_frames_are_the_timed_ones(made, doc["plans"]["ground"])


def _check_frames_are_the_timed_ones(sv: Any, plan: dict) -> None:
    """The frame decoded at each planned index is the synthetic frame presented at the
    planned time, and carries that time itself, on both decoding routes."""
    t0 = sv.timestamps_s[0]
    for backend in ("pyav", "opencv"):
        frames, read, own = read_frames_timed(sv.path, plan["frame_indices"], backend=backend)
        assert list(read) == plan["frame_indices"]
        for frame, index, t, mine in zip(frames, read, plan["timestamps_s"], own):
            assert sv.index_of(frame) == index
            assert abs(t - (sv.timestamps_s[index] - t0)) <= TOL
            assert abs(mine - t) <= TOL, (backend, index, mine, t)


def test_backward_jump_is_placed_after_and_says_by_how_much(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture
                                                            ) -> None:
    """Two joined recordings whose clock restarts 9 s earlier: times stay increasing, the
    first recording's are exact, and the warning says how far the rest may be off."""
    first, second = [10 + t for t in CFR[:25]], [2 + t for t in CFR[:25]]
    path = make_restarting_ts(tmp_path / "joined.ts", first, second)
    rc, doc, err = _probe(path, tmp_path / "p.json", capsys)
    assert rc == 0, err
    assert any("go back by 9.0 s after frame 24" in w for w in doc["video"]["warnings"])
    plan = doc["plans"]["ground"]
    truth = container_times(path)
    times = plan["timestamps_s"]
    assert all(b > a for a, b in zip(times, times[1:]))
    for index, t in zip(plan["frame_indices"], times):
        if index < 25:
            assert abs(t - truth[index]) <= TOL
        else:  # shifted by the 8.96 s the clock went back, plus one frame interval
            assert abs(t - (truth[index] + 9.0)) <= TOL
    frames, read = read_frames(path, plan["frame_indices"])
    from chord_core.testing.videos import read_frame_index

    assert [read_frame_index(f) for f in frames] == list(read) == plan["frame_indices"]


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "pipe.mp4")
    return d / "pipe.mp4"


def _loop(d: Path) -> Path:
    (d / "a.mp4").symlink_to(d / "b.mp4")
    (d / "b.mp4").symlink_to(d / "a.mp4")
    return d / "a.mp4"


def _dangling(d: Path) -> Path:
    (d / "gone.mp4").symlink_to(d / "never-there.mp4")
    return d / "gone.mp4"


def _missing_moov(d: Path) -> Path:
    sv = make_video(d / "src.mp4", duration_s=2, fps=25, size_wh=(96, 64))
    return make_truncated(sv.path, d / "no-moov.mp4", 0.6)


def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        (d / name).write_bytes(data)
        return d / name
    return make


def _folder(name: str) -> Callable[[Path], Path]:
    return lambda d: (d / name).mkdir() or d / name


# id → (maker, phrase the error line must contain)
REFUSED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "zero-byte": (lambda d: make_zero_byte(d / "empty.mp4"), "is empty (0 bytes)"),
    "text-as-mp4": (lambda d: make_text_as_mp4(d / "notes.mp4"), "is a text file"),
    "pgp-key-asc": (lambda d: make_armored_text(d / "key.asc"), "is a text file"),
    "ansi-art-nfo": (lambda d: make_ansi_art(d / "release.nfo"), "is a text file"),
    "ansi-art-ans": (lambda d: make_ansi_art(d / "logo.ans"), "is a text file"),
    "utf8-txt": (_write("readme.txt", "héllo wörld — ünïcode\n".encode() * 30),
                 "is a text file"),
    "png-as-mp4": (lambda d: make_png(d / "photo.mp4"), "is a PNG image"),
    "jpeg-as-mp4": (lambda d: make_jpeg(d / "photo2.mp4"), "is a JPEG image"),
    "png": (lambda d: make_png(d / "photo.png"), "is a PNG image"),
    "gif": (_write("anim.gif", b"GIF89a" + bytes(range(256)) * 4), "is a GIF image"),
    "pdf-as-mp4": (_write("paper.mp4", b"%PDF-1.7\n" + bytes(range(256)) * 4),
                   "is a PDF document"),
    "fifo": (_fifo, "is a named pipe (FIFO)"),
    "dev-zero": (lambda d: Path("/dev/zero"), "is a character device"),
    "dev-null": (lambda d: Path("/dev/null"), "is a character device"),
    "folder": (_folder("clips"), "is a folder"),
    "folder-named-mp4": (_folder("folder.mp4"), "is a folder"),
    "symlink-loop": (_loop, "symbolic link loop"),
    "dangling-symlink": (_dangling, "not found"),
    "missing": (lambda d: d / "nowhere.mp4", "not found"),
    "missing-moov": (_missing_moov, "cannot open no-moov.mp4"),
    "truncated-30pct": (lambda d: make_truncated(
        make_video(d / "s.mp4", duration_s=2, size_wh=(96, 64)).path, d / "cut.mp4", 0.3),
        "cut.mp4"),
    "undecodable-avi": (lambda d: make_undecodable(d / "hollow.avi"), "no frame could be"),
    "audio-only-m4a": (lambda d: make_audio_only(d / "voice.m4a"), "no video stream"),
    "audio-only-mp4": (lambda d: make_audio_only(d / "voice.mp4"), "(audio only)"),
    "random-bytes": (_write("noise.mp4", os.urandom(4096)), "cannot open noise.mp4"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_refused_file_one_error_and_one_hint(case: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    make, phrase = REFUSED[case]
    path = make(tmp_path)
    rc = main(["probe", "--", str(path)])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert rc == 2, captured.err
    assert lines[0].startswith("error: ") and phrase in lines[0], lines
    assert len(lines) == 2 and lines[1].startswith("hint: "), lines
    assert captured.out == ""


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "chord_core", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


SUBPROCESS = {  # the native libraries would speak first on these
    "missing-moov": ("probe", _missing_moov, "cannot open no-moov.mp4"),
    "random-bytes": ("probe", REFUSED["random-bytes"][0], "cannot open noise.mp4"),
    "undecodable-avi": ("probe", REFUSED["undecodable-avi"][0], "no frame could be"),
    "batch-fifo": ("batch", _fifo, "is a named pipe (FIFO)"),
    "batch-dev-zero": ("batch", lambda d: Path("/dev/zero"), "is a character device"),
}


@pytest.mark.parametrize("case", SUBPROCESS, ids=list(SUBPROCESS))
def test_no_native_chatter_before_the_error(case: str, tmp_path: Path) -> None:
    command, make, phrase = SUBPROCESS[case]
    path = make(tmp_path)
    extra = ("--task", "describe", "--out", str(tmp_path / "out")) if command == "batch" else ()
    proc = _cli(command, *extra, "--", str(path))
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("error: ") and phrase in lines[0]
    assert lines[1].startswith("hint: ")


def test_leading_dash_name_without_double_dash_says_so(tmp_path: Path) -> None:
    make_video(tmp_path / "-clip.mp4", duration_s=0.5, fps=10, size_wh=(64, 48))
    proc = _cli("probe", "-clip.mp4", cwd=tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 2, proc.stderr
    assert lines[0].startswith("error: ")
    assert lines[1].startswith("hint: put -- before file names starting with '-'")


LONG = "x" * 100_000
OPTIONS = {  # refused before any model is loaded (the model folder does not even exist)
    "batch-size-0": (["ground", "{clip}", "a car", "--batch-size", "0"], "--batch-size"),
    "batch-size-negative": (["describe", "{clip}", "--batch-size", "-3"], "--batch-size"),
    "max-memory-lots": (["describe", "{clip}", "--max-memory", "lots"], "'lots'"),
    "max-memory-fraction-2": (["describe", "{clip}", "--max-memory", "2"], "fraction"),
    "target-100kB": (["ground", "{clip}", LONG], "the target is 100,000 characters"),
    "prompt-100kB": (["describe", "{clip}", "--prompt", LONG], "the prompt is 100,000"),
}


@pytest.mark.parametrize("case", OPTIONS, ids=list(OPTIONS))
def test_bad_option_refused_before_loading(case: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    args, phrase = OPTIONS[case]
    clip = make_video(tmp_path / "c.mp4", duration_s=0.5, fps=10, size_wh=(64, 48)).path
    argv = [a.format(clip=clip) for a in args] + ["--model", str(tmp_path / "no-model"), "-q"]
    rc = main(argv)
    lines = capsys.readouterr().err.splitlines()
    assert rc == 2, lines
    assert lines[0].startswith("error: ") and phrase in lines[0], lines
    assert len(lines) == 2 and lines[1].startswith("hint: ")


def test_ground_times_and_detections_follow_the_container(tmp_path: Path, tiny_model_dir,
                                                          capsys: pytest.CaptureFixture
                                                          ) -> None:
    """The tiny model on a clip with a +100 s jump: the result's frame times (and any
    detection's) are the container's, not index / average fps."""
    times = CFR[:10] + [101 + t for t in CFR[:10]]
    sv = make_timed_video(tmp_path / "jump.mp4", times, size_wh=(112, 84))
    out = tmp_path / "r.json"
    rc = main(["ground", str(sv.path), "the green square", "--model", "test", "-q",
               "--max-frames", "6", "--json", str(out)])
    assert rc == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    s = doc["sampling"]
    truth = container_times(sv.path)
    assert s["timestamps_s"] and all(abs(t - truth[i]) <= TOL for i, t in
                                     zip(s["frame_indices"], s["timestamps_s"]))
    assert any(t > 100 for t in s["timestamps_s"])
    assert {d["t_s"] for d in doc["detections"]} <= set(s["timestamps_s"])
    assert any("jump by +100.6 s after frame 9" in w for w in doc["warnings"])


def _under_a_file(d: Path) -> Path:
    (d / "plain-file").write_text("x")
    return d / "plain-file" / "out.json"


UNWRITABLE = {
    "json-under-a-file": (_under_a_file, "cannot write the JSON output"),
    "json-in-proc": (lambda d: Path("/proc/no-such-dir/out.json"), "cannot write the JSON"),
}


@pytest.mark.parametrize("case", UNWRITABLE, ids=list(UNWRITABLE))
def test_unwritable_json_output_refused(case: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture) -> None:
    make, phrase = UNWRITABLE[case]
    clip = make_video(tmp_path / "c.mp4", duration_s=0.5, fps=10, size_wh=(64, 48)).path
    rc = main(["probe", str(clip), "--json", str(make(tmp_path))])
    lines = capsys.readouterr().err.splitlines()
    assert rc == 2, lines
    assert lines[0].startswith("error: ") and phrase in lines[0], lines
    assert len(lines) == 2 and lines[1].startswith("hint: ")


OPENCV_ONLY = ["mp4-vfr-cycle", "mkv-vfr-ramp", "mp4-jump-forward-100s", "mkv-jump-forward-3s",
               "mkv-huge-header-fps", "mp4-h264-bframes"]


@pytest.mark.parametrize("case", OPENCV_ONLY, ids=OPENCV_ONLY)
def test_exact_times_without_pyav_timestamps(case: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU hosts have no PyAV: the probe's decoder (OpenCV) then supplies each frame's
    time wherever it decodes every frame (irregular files), with the same warnings."""
    import chord_core.media.frame_times as frame_times

    monkeypatch.setattr(frame_times, "read_frame_times", lambda path: None)
    make, phrase = GOOD[case]
    path = _path_of(make(tmp_path))
    rc, doc, err = _probe(path, tmp_path / "probe.json", capsys)
    assert rc == 0, err
    warnings = doc["video"]["warnings"]
    assert (warnings == []) if phrase is None else any(phrase in w for w in warnings)
    truth = container_times(path)
    for plan in doc["plans"].values():
        for index, t in zip(plan["frame_indices"], plan["timestamps_s"]):
            assert abs(t - truth[index]) <= TOL, (index, t, truth[index])


def test_annotated_video_frames_are_timed_like_the_plan(tmp_path: Path) -> None:
    """The annotated MP4 walks every frame with the probe's times, so boxes found on a frame
    past a +100 s jump are drawn on that frame (render._read_frames → iter_frames)."""
    from chord_core.analysis import render
    from chord_core.media.probe import probe

    sv = make_timed_video(tmp_path / "jump.mkv", CFR[:10] + [101 + t for t in CFR[:10]])
    info = probe(sv.path)
    times = [t for _, t, _ in render._read_frames(sv.path, info)]
    truth = container_times(sv.path)
    assert len(times) == len(truth) == 20
    assert all(abs(a - b) <= TOL for a, b in zip(times, truth))


@pytest.mark.slow
def test_packed_b_frames_in_avi_keep_the_display_order_times(tmp_path: Path, tiny_model_dir,
                                                            capsys: pytest.CaptureFixture
                                                            ) -> None:
    """MPEG-4 part 2 with packed B-frames in AVI (``Megamind.avi``'s kind, no pts stored):
    PyAV reports the decoded frames' pts out of order (1, 3, 2, 5, 4 …) while the frames come
    in display order. Chord used those times whenever the sampled subset looked increasing
    (7 of 32 frames got a neighbour's time, ±42 ms); now times that do not increase over
    every decoded frame are not trusted, with a warning, and each sampled frame keeps
    index / 24 fps, which the index band on the frame proves."""
    from chord_core.testing.videos import read_frame_index

    sv = make_packed_bframes_avi(tmp_path / "packed.avi", count=96, fps=24)
    decoded = container_times(sv.path)
    assert any(b <= a for a, b in zip(decoded, decoded[1:]))  # the premise: PyAV's disorder
    out = tmp_path / "r.json"
    rc = main(["describe", str(sv.path), "--model", "test", "-q", "--fps", "8",
               "--max-new-tokens", "1", "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    s = json.loads(out.read_text())["sampling"]
    assert len(s["frame_indices"]) == 32
    for index, t in zip(s["frame_indices"], s["timestamps_s"]):
        assert abs(t - index / 24) <= TOL, (index, t)  # a neighbour's would be 42 ms off
    frames, read = read_frames(sv.path, s["frame_indices"])
    assert [read_frame_index(f) for f in frames] == list(read) == s["frame_indices"]
