"""Frames read ahead (``media/read_ahead.py``): what a worker reads while the model runs the
task in hand is exactly what its next task would have read itself, a hint that turns out
wrong costs nothing but the read, and a bad file fails in its own task, not in the
read-ahead. Real clips, real decoding."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from chord_core.analysis.request import probe_input
from chord_core.config import SamplingConfig
from chord_core.media.read_ahead import ReadAhead, read_plan
from chord_core.media.sampling import plan_sampling
from chord_core.testing.videos import make_video


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("ahead")
    out = []
    for i in range(3):
        path = make_video(d / f"c{i}.mp4", duration_s=2.0, fps=10.0, size_wh=(96, 72)).path
        info = probe_input(str(path))
        out.append((info, plan_sampling(info, "ground", SamplingConfig(fps=4.0))))
    return out


def settled(ahead: ReadAhead) -> ReadAhead:
    deadline = time.monotonic() + 60
    while not ahead.idle():
        assert time.monotonic() < deadline, "the reads ahead never finished"
        time.sleep(0.01)
    return ahead


def test_what_is_taken_is_what_a_read_gives(clips):
    ahead = ReadAhead()
    ahead.expect(clips)
    settled(ahead)
    for info, plan in clips:
        got = ahead.take(info, plan)
        assert got is not None
        frames, read, decoded, waited = got
        want, want_read, want_decoded = read_plan(info, plan)
        assert np.array_equal(frames, want)
        assert read == want_read == tuple(plan.frame_indices)
        assert decoded == want_decoded
        assert waited >= 0.0
    assert ahead.stats["hits"] == 3
    assert ahead.take(*clips[0]) is None  # taken once: a second read is the task's own


def test_a_hint_no_longer_expected_is_dropped(clips):
    ahead = ReadAhead()
    ahead.expect(clips[:2])
    ahead.expect(clips[1:])  # the first task went to another worker
    settled(ahead)
    assert ahead.take(*clips[0]) is None
    assert ahead.take(*clips[2]) is not None
    assert ahead.stats["dropped"] == 1


def test_a_file_changed_since_the_hint_is_read_again(clips, tmp_path):
    info, plan = clips[0]
    copy = tmp_path / "moved.mp4"
    copy.write_bytes(open(info.path, "rb").read())
    moved = type(info)(**{**info.__dict__, "path": str(copy)})
    ahead = ReadAhead()
    ahead.expect([(moved, plan)])
    settled(ahead)
    os.utime(copy, ns=(time.time_ns(), time.time_ns() + 10**9))  # rewritten since
    assert ahead.take(moved, plan) is None


def test_a_bad_file_fails_in_its_own_task(clips, tmp_path):
    info, plan = clips[0]
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 4096)
    broken = type(info)(**{**info.__dict__, "path": str(bad)})
    ahead = ReadAhead()
    ahead.expect([(broken, plan), clips[1]])
    settled(ahead)
    assert ahead.take(broken, plan) is None  # the task reads it itself and gets the error
    assert ahead.take(*clips[1]) is not None  # the read behind it still happened


def test_held_frames_are_bounded(clips):
    info, plan = clips[0]
    one = plan.num_frames * plan.input_wh[0] * plan.input_wh[1] * 3
    ahead = ReadAhead(max_bytes=one)  # room for the first read only
    ahead.expect(clips)
    settled(ahead)
    assert ahead.take(*clips[0]) is not None
    assert ahead.take(*clips[1]) is None


def test_a_cancelled_task_stops_waiting(clips):
    ahead = ReadAhead()
    cancel = threading.Event()
    cancel.set()
    ahead.expect(clips[:1])
    # cancelled before the read finished or after: either way no frames are handed over
    # unless the read had already finished, and the call returns at once
    t = time.perf_counter()
    got = ahead.take(*clips[0], cancel)
    assert time.perf_counter() - t < 5
    assert got is None or got[0].shape[0] == clips[0][1].num_frames


def test_a_task_that_comes_before_its_read_began_reads_itself(clips):
    ahead = ReadAhead()
    ahead.expect(clips)
    last = clips[-1]  # behind two decodes on the one read-ahead thread: not begun yet
    assert ahead.take(*last) is None
    settled(ahead)
    assert ahead.take(*last) is None  # and it was not read behind the task's back
    assert ahead.take(*clips[0]) is not None


def test_the_task_in_hand_keeps_its_read(clips):
    ahead = ReadAhead()
    ahead.expect(clips[:2])
    settled(ahead)
    ahead.expect(clips[2:], now=clips[:1])  # the first task is now running; the second left
    settled(ahead)
    assert ahead.take(*clips[0]) is not None
    assert ahead.take(*clips[1]) is None
    assert ahead.take(*clips[2]) is not None


def test_two_streams_run_two_expected_reads_at_once(clips, monkeypatch):
    """On a GPU the engine asks 2 streams: the second expected read is under way while the
    first still decodes (NVDEC's sessions then take both reads' GOPs), one stream never."""
    from chord_core.media import read_ahead as ra

    real = ra.read_plan_full
    for streams, overlapped in ((2, True), (1, False)):
        gate, started = threading.Event(), []

        def slow(info, plan, cancel=None, on_progress=None, *, model_device=None):
            started.append(info.path)
            gate.wait(1.0 if streams == 1 else 10)  # a single stream: the wait times out
            return real(info, plan, cancel, on_progress, model_device=model_device)

        monkeypatch.setattr(ra, "read_plan_full", slow)
        ahead = ReadAhead(streams=streams)
        ahead.expect(clips[:2])
        deadline = time.monotonic() + 5
        while len(started) < 2 and time.monotonic() < deadline and overlapped:
            time.sleep(0.01)
        assert (len(started) == 2) is overlapped  # both began before either could finish
        gate.set()
        settled(ahead)
        for info, plan in clips[:2]:
            frames, read, _, _ = ahead.take(info, plan)
            assert read == tuple(plan.frame_indices)
