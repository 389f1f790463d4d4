"""NVDEC's sessions kept busy across reads (issue 34): a read's GOPs are placed on the
sessions by decoded-frame cost (``media/nvdec_plan.py``) and queued behind the GOPs of reads
still in flight (``media/nvdec_sessions.py``). The plan is asserted directly; the reader runs
over fake sessions (``fake_decoder.FakeNvSession``: which frames each session decodes, its
seeks and reopens), held at a gate where a test needs reads to overlap. No timings."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from chord_core.errors import JobCancelled
from chord_core.media.gop import plan_gops, split_reads
from chord_core.media.nvdec import NvdecReader
from chord_core.media.nvdec_plan import BACKWARD_COST, Lane, assign, busy_share, step_cost
from chord_core.media.reader_types import ReaderFailed, ReadRequest
from chord_core.media.readers import CpuPoolReader, read_frames_auto
from fake_decoder import FakeGopDecoder, FakeNvSession, FakeStream, fake_clip

FPS = 30.0
KEYS = list(range(0, 20000, 60))  # 720p30 real footage: a keyframe every 2 s


def dense(start: int, n: int = 512):
    return plan_gops(range(start, start + n), KEYS)


# -- the plan -------------------------------------------------------------------------------

@pytest.mark.parametrize("start", [0, 512, 1024])
def test_a_512_frame_read_gives_all_8_sessions_work_each_gop_once_in_order(start):
    reads = dense(start)
    lanes = [Lane(opened=True) for _ in range(8)]
    picks = assign(reads, lanes, 8)
    assert sorted(set(picks)) == list(range(8))  # consecutive runs used 8 too, but unevenly
    assert len(picks) == len(reads)  # one lane a GOP: none decoded twice
    for lane in range(8):
        mine = [r for r, p in zip(reads, picks) if p == lane]
        assert all(a.wanted[-1] < b.wanted[0] for a, b in zip(mine, mine[1:]))  # forward


def test_reads_queued_behind_each_other_keep_the_sessions_busy():
    """Eight 512-frame reads placed as they come (each behind the last's queue) against the
    old way: consecutive runs, every read waiting for its largest run."""
    reads = [dense(s) for s in range(0, 4096, 512)]
    lanes = [Lane(opened=True) for _ in range(8)]
    for r in reads:
        assign(r, lanes, 8)
    total = sum(g.cost for r in reads for g in r)
    queued = [lane.queued for lane in lanes]
    ours = sum(queued) / (8 * max(queued))
    joined = sum(max(sum(g.cost for g in part) for part in split_reads(r, 8)) for r in reads)
    old = total / (8 * joined)
    assert ours >= 0.9 and old < 0.6  # (ours counts its seeks as work: 0.95)
    assert max(queued) - min(queued) <= 60 + 8  # within one GOP and a seek of each other
    assert busy_share(reads[0], 8) > old  # even one read alone is placed more evenly


def test_a_costly_backward_step_is_taken_only_when_nothing_forward_is_cheaper():
    g = plan_gops(range(0, 30), KEYS)[0]
    assert step_cost(100, g) == BACKWARD_COST + g.cost
    assert step_cost(-1, g) == g.cost
    nxt = plan_gops(range(60, 90), KEYS)[0]
    assert step_cost(59, nxt) == 30  # decodes on from frame 59: no seek
    lanes = [Lane(last=500, opened=True), Lane(last=10, opened=True)]
    assert assign([nxt], lanes, 2) == [1]  # the lane behind it, though it is further
    lanes = [Lane(last=500, opened=True)]
    assert assign([nxt], lanes, 2) == [1] and len(lanes) == 2  # a new session, not back


def test_sparse_grounding_reads_spread_evenly_over_4_sessions():
    reads = plan_gops(range(0, 64 * 60, 60), KEYS)  # 64 frames, one a GOP
    lanes = [Lane(opened=True) for _ in range(4)]
    picks = assign(reads, lanes, 4)
    assert [picks.count(i) for i in range(4)] == [16, 16, 16, 16]


# -- the reader over fake sessions ------------------------------------------------------------

class Gated(FakeNvSession):
    """Decodes only once ``gate`` is open (reads can be submitted while others wait)."""

    gate = threading.Event()

    def get_batch_frames_by_index(self, indices):
        assert Gated.gate.wait(10), "the test never opened the gate"
        return super().get_batch_frames_by_index(indices)


class Failing(FakeNvSession):
    """Raises on its ``fail_at``-th call (1-based), like a decoder error mid-read."""

    fail_at = 2

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.calls = 0

    def get_batch_frames_by_index(self, indices):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE (fake)")
        return super().get_batch_frames_by_index(indices)


@pytest.fixture
def clip(monkeypatch, tmp_path):
    return lambda stream: fake_clip(stream, monkeypatch, tmp_path, FPS)


def reader(stream: FakeStream, made: list, kind=FakeNvSession, decoders: int = 8):
    def factory(name: str, gpu: int):
        made.append(kind(stream, name, gpu))
        return made[-1]
    return NvdecReader(decoders, factory=factory, device="cpu")


def check(got, want, s: FakeStream) -> None:
    assert got.reader == "nvdec" and got.indices == tuple(want)
    assert [int(f[0, 0, 0]) for f in got.frames] == [k % 256 for k in want]
    assert got.times_s == pytest.approx([k / FPS for k in want], abs=1e-6)


def test_8_sessions_all_decode_a_512_frame_read_and_no_frame_twice(clip):
    s, made = FakeStream(frames=3000, gop=60, size_wh=(64, 48)), []
    r, info = reader(s, made), clip(s)
    r.read(ReadRequest(info, (0,), (32, 24)))  # the file's pts shift: frame 0, once
    for x in made:
        x.frames_decoded.clear()
    want = tuple(range(600, 1112))
    got = r.read(ReadRequest(info, want, (32, 24)))
    check(got, want, s)
    assert len(made) == 8 and all(x.cost > 0 for x in made)
    decoded = sorted(k for x in made for k in x.frames_decoded)
    assert decoded == list(range(600, 1112))  # every GOP by one session, heads included
    assert got.stats["sessions"] == 8 and sum(x.reopens for x in made) == 0


def test_a_read_submitted_behind_another_fills_the_sessions_it_left_idle(clip):
    s, made = FakeStream(frames=3000, gop=60, size_wh=(64, 48)), []
    r, info = reader(s, made, Gated), clip(s)
    Gated.gate.set()
    r.read(ReadRequest(info, (0,), (32, 24)))
    for x in made:
        x.cost = 0
    Gated.gate.clear()
    wants = [tuple(range(a, a + 512)) for a in (600, 1112, 1624)]
    pending = [r.submit(ReadRequest(info, w, (32, 24))) for w in wants]  # all queued at once
    Gated.gate.set()
    for p, w in zip(pending, wants):
        check(p.result(), w, s)
    costs = sorted(x.cost for x in made)
    assert len(made) == 8 and sum(costs) == 3 * 512  # nothing decoded twice
    assert costs[-1] - costs[0] <= 60  # even to a GOP (consecutive runs: 120 vs 32 a read)
    assert sum(x.reopens for x in made) == 0


def test_a_cancelled_read_stops_and_its_queued_gops_are_skipped(clip):
    s, made = FakeStream(frames=3000, gop=60, size_wh=(64, 48)), []
    r, info = reader(s, made, Gated, decoders=2), clip(s)
    Gated.gate.set()
    r.read(ReadRequest(info, (0,), (32, 24)))
    Gated.gate.clear()
    cancel = threading.Event()
    p = r.submit(ReadRequest(info, tuple(range(60, 2400)), (32, 24), cancel=cancel))
    cancel.set()
    with pytest.raises(JobCancelled):
        p.result()
    Gated.gate.set()
    after = r.read(ReadRequest(info, (2500, 2501), (32, 24)))  # the sessions still work
    check(after, (2500, 2501), s)
    assert len([k for k in s.decoded if 60 <= k < 2400]) <= 2 * 48  # one call a session


def test_a_session_error_mid_read_falls_back_whole_and_the_next_read_uses_nvdec(clip):
    s, made = FakeStream(frames=600, gop=30, size_wh=(64, 48)), []
    r, info = reader(s, made, Failing, decoders=4), clip(s)
    pool = CpuPoolReader(decoder_factory=lambda path: FakeGopDecoder(s))
    want = tuple(range(0, 600, 7))
    got = read_frames_auto(ReadRequest(info, want, (32, 24)), [r, pool])
    assert got.reader == "cpu-pool" and "nvdec failed: RuntimeError" in got.note
    assert got.indices == want  # the whole read, not NVDEC's half
    assert isinstance(got.frames, np.ndarray)
    Failing.fail_at = 10 ** 6
    again = r.read(ReadRequest(info, want, (32, 24)))
    check(again, want, s)
    assert len(made) > 4  # the failed sessions were dropped and new ones opened


def test_a_wrong_pts_fails_the_read_not_the_other_reads(clip):
    s, made = FakeStream(frames=600, gop=30, renumber_from=450), []
    r, info = reader(s, made, decoders=4), clip(s)
    bad = r.submit(ReadRequest(info, tuple(range(400, 500, 3)), (32, 24)))
    good = r.submit(ReadRequest(info, tuple(range(30, 300, 9)), (32, 24)))
    with pytest.raises(ReaderFailed, match="has pts"):
        bad.result()
    check(good.result(), tuple(range(30, 300, 9)), s)


def test_reads_in_flight_together_each_keep_their_own_size(clip):
    s, made = FakeStream(frames=1200, gop=60, size_wh=(64, 48)), []
    r, info = reader(s, made, Gated, decoders=4), clip(s)
    Gated.gate.set()
    r.read(ReadRequest(info, (0,), (32, 24)))
    Gated.gate.clear()
    small = r.submit(ReadRequest(info, tuple(range(100, 400, 7)), (16, 12)))
    large = r.submit(ReadRequest(info, tuple(range(300, 700, 9)), (48, 36)))
    Gated.gate.set()
    a, b = small.result(), large.result()
    assert a.frames.shape[1:] == (12, 16, 3) and b.frames.shape[1:] == (36, 48, 3)
    check(a, tuple(range(100, 400, 7)), s)
    check(b, tuple(range(300, 700, 9)), s)
