"""The readers on real files (PyAV): on clips of the reliability corpus the keyframe-aware
CPU reader gives the default reader's pictures, and every frame's time equals the
container's presentation time (read independently with PyAV); streams it cannot prove fall
back with a note; a truncated file says where it stopped; the pool spreads a long read over
processes; chapters' samples move to keyframes and say how far."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chord_core.media.frame_times import TIME_TOLERANCE_S
from chord_core.media.probe import probe
from chord_core.media.readers import (
    CpuPoolReader,
    DefaultReader,
    ReadRequest,
    read_frames_auto,
    reader_chain,
)
from chord_core.testing.odd_files import container_times, make_packed_bframes_avi, make_timed_video
from chord_core.testing.videos import has_pyav, make_truncated, make_video

pytestmark = pytest.mark.skipif(not has_pyav(), reason="PyAV (package av) is not installed")

CFR = [i / 25 for i in range(50)]
CLIPS = {
    "mp4-h264-bframes": lambda d: make_video(d / "b.mp4", duration_s=4, fps=25, size_wh=(96, 64)),
    "mkv-h264": lambda d: make_video(d / "c.mkv", duration_s=2, fps=24, size_wh=(96, 64)),
    "webm-vp9": lambda d: make_video(d / "c.webm", duration_s=2, fps=10, size_wh=(96, 64)),
    "mov-h264": lambda d: make_video(d / "c.mov", duration_s=2, fps=30, size_wh=(96, 64)),
    "mp4-hevc": lambda d: make_timed_video(d / "h.mp4", CFR[:30], codec="libx265"),
    "mp4-rotated-90": lambda d: make_video(d / "r.mp4", duration_s=1, fps=10, size_wh=(96, 64),
                                           rotation=90),
    "mp4-vfr-cycle": lambda d: make_video(d / "vfr.mp4", duration_s=3, fps=10, size_wh=(96, 64),
                                          vfr=True),
    "mp4-jump-forward-100s": lambda d: make_timed_video(d / "j.mp4",
                                                        CFR[:25] + [101 + t for t in CFR[:25]]),
    "mkv-ntsc-ms-clock": lambda d: make_video(d / "n.mkv", duration_s=3, fps=30000 / 1001,
                                              size_wh=(96, 64)),
    "mp4-mpeg4-part2": lambda d: make_video(d / "v.mp4", duration_s=2, fps=12, size_wh=(96, 64),
                                            codec="mp4v"),
}


def _path(made) -> Path:
    return made.path if hasattr(made, "path") else Path(made)


@pytest.mark.parametrize("case", CLIPS, ids=list(CLIPS))
def test_times_are_the_containers_and_pictures_the_default_readers(case, tmp_path):
    path = _path(CLIPS[case](tmp_path))
    info = probe(path)
    want = tuple(range(0, info.frame_count, 3))
    req = ReadRequest(info, want, (48, 32))
    got = read_frames_auto(req, reader_chain("cpu-pool"))
    assert got.indices == want
    truth = container_times(path)
    assert np.max(np.abs(np.array(got.times_s) - np.array([truth[k] for k in want]))) \
        <= TIME_TOLERANCE_S + 1e-6
    if got.reader == "cpu-pool":
        ref = DefaultReader().read(req)
        assert np.array_equal(got.frames, ref.frames)
    assert got.note.startswith(f"read by {got.reader}")


def test_fast_decode_skips_b_frames_and_the_loop_filter_near_the_exact_frames(tmp_path):
    """``CHORD_DECODE=fast``'s shortcuts on a real x264 clip (b-pyramid: some B-frames are
    references): fewer frames decoded, the same frames at the same times, pictures a little
    off the exact ones (measured 1.2 of 255 levels on average here, one 100-frame GOP; real
    footage in 2-s GOPs 0.65), and a keyframe differs too (its loop filter skipped)."""
    info = probe(make_video(tmp_path / "b.mp4", duration_s=4, fps=25, size_wh=(96, 64)).path)
    req = ReadRequest(info, tuple(range(1, info.frame_count, 7)), None)
    exact = CpuPoolReader(procs=1, fast=False).read(req)
    fast = CpuPoolReader(procs=1, fast=True).read(req)
    assert fast.indices == exact.indices and fast.times_s == exact.times_s
    assert fast.stats["decoded"] < exact.stats["decoded"]
    off = np.abs(fast.frames.astype(np.int16) - exact.frames.astype(np.int16))
    assert 0 < off.mean() < 4, off.mean()
    key = ReadRequest(info, (0,), None)
    key_off = np.abs(CpuPoolReader(procs=1, fast=True).read(key).frames.astype(np.int16)
                     - CpuPoolReader(procs=1, fast=False).read(key).frames)
    assert 0 < key_off.mean() < 4


def test_packed_b_frames_avi_falls_back_with_a_note(tmp_path):
    info = probe(_path(make_packed_bframes_avi(tmp_path / "packed.avi")))
    got = read_frames_auto(ReadRequest(info, (0, 5, 9), (48, 32)))
    assert got.reader == "default" and len(got.indices) == 3
    assert "cpu-pool not used: frame indices are not provable from packets (AVI stores no " \
        "presentation times)" in got.note
    assert "nvdec not used" in got.note


def test_truncated_file_reads_what_it_can_and_says_where_it_stopped(tmp_path):
    from dataclasses import replace

    full = make_video(tmp_path / "full.mp4", duration_s=8, fps=25, size_wh=(96, 64),
                      faststart=True)
    cut = make_truncated(full.path, tmp_path / "cut.mp4", 0.5)
    info = probe(cut)  # 61 of the 200 frames the header claims decode
    later = replace(info, frame_count=200)  # as if it was cut after the plan was made
    req = ReadRequest(later, (10, 50, 60, 150, 190), (48, 32))
    # the keyframe-aware reader, or — when the damaged tail's packet times do not match the
    # probe's (the probe of a truncated file varies with what it decoded) — the default one
    got = read_frames_auto(req, reader_chain("cpu-pool"))
    ref = DefaultReader().read(req)  # front to back: the frames that decode at all
    assert got.indices == ref.indices and got.indices[:2] == (10, 50)
    assert got.stopped_at == ref.stopped_at == req.indices[len(got.indices)]
    assert np.array_equal(got.frames, ref.frames)
    assert f"frame {got.stopped_at}" in got.warnings()[0]


def test_the_pool_spreads_a_long_read_over_processes(tmp_path):
    info = probe(make_video(tmp_path / "long.mp4", duration_s=24, fps=25,
                            size_wh=(96, 64)).path)
    want = tuple(range(2, info.frame_count, 11))
    got = CpuPoolReader(procs=2).read(ReadRequest(info, want, (48, 32)))
    assert got.stats["procs"] == 2 and got.indices == want
    assert np.array_equal(got.frames, DefaultReader().read(ReadRequest(info, want, (48, 32))).frames)
    # a worker (daemonic: no children) runs the same two parts on threads of its own process
    from chord_core.media.gop import plan_gops, split_reads
    from chord_core.media.packet_index import packet_index

    assert len(split_reads(plan_gops(want, packet_index(info.path).keyframes), 2)) == 2
    threads = CpuPoolReader(procs=2, threads_only=True).read(ReadRequest(info, want, (48, 32)))
    assert threads.indices == want and np.array_equal(threads.frames, got.frames)


def test_chapter_samples_move_to_keyframes_and_say_how_far(tmp_path):
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chunks import Chunk, chunk_plan, snap_plan
    from chord_core.media.packet_index import packet_index

    info = probe(make_video(tmp_path / "k.mp4", duration_s=40, fps=25, size_wh=(96, 64)).path)
    chunk = Chunk(0, 0, info.frame_count, 0.0, info.duration_s)
    plan = chunk_plan(info, chunk, "describe", SamplingConfig(fps=0.5, max_frames=16))
    snapped = snap_plan(info, plan, 0, info.frame_count)
    keys = set(packet_index(info.path).keyframes)
    from chord_core.longvideo.chunks import range_plan

    part = range_plan(info, 310, 690, "describe", SamplingConfig(fps=0.5, max_frames=16))
    inner = snap_plan(info, part, 310, 690)  # a chunk's samples stay inside its frames
    assert all(310 <= k < 690 for k in inner.frame_indices)
    step = plan.timestamps_s[1] - plan.timestamps_s[0]
    assert len(snapped.keyframe_moves_s) == plan.num_frames
    for k, t0, t, moved in zip(snapped.frame_indices, plan.timestamps_s, snapped.timestamps_s,
                               snapped.keyframe_moves_s):
        assert k in keys or moved == 0.0
        assert moved == pytest.approx(t - t0, abs=1e-6) and abs(moved) <= step / 2 + 1e-6
        assert t == pytest.approx(info.time_of(k), abs=1e-6)


def test_keyframe_scan_reads_the_index_not_every_frame(tmp_path):
    from chord_core.longvideo.scenes import find_cuts
    from chord_core.longvideo.settings import LongVideoSettings
    from chord_core.media.packet_index import packet_index

    info = probe(make_video(tmp_path / "s.mp4", duration_s=30, fps=25, size_wh=(96, 64)).path)
    scan = find_cuts(info, LongVideoSettings(cuts="keyframes"))
    assert scan.frames_examined == len(packet_index(info.path).keyframes)


def test_a_daemonic_worker_decodes_its_parts_on_threads(tmp_path, monkeypatch):
    import multiprocessing
    from types import SimpleNamespace

    # Chord's GPU workers are daemonic processes, which may not start children (seen on an
    # H200: "daemonic processes are not allowed to have children")
    monkeypatch.setattr(multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))
    info = probe(make_video(tmp_path / "d.mp4", duration_s=24, fps=25, size_wh=(96, 64)).path)
    want = tuple(range(2, info.frame_count, 11))
    got = CpuPoolReader(procs=2).read(ReadRequest(info, want, (48, 32)))
    assert got.indices == want and got.stats["procs"] == 2
    assert np.array_equal(got.frames, DefaultReader().read(ReadRequest(info, want, (48, 32))).frames)
