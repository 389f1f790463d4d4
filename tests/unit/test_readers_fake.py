"""Frame readers over a fake decoder at the reader boundary: the packet index and its times,
the GOP planner, keyframe snapping, the NVDEC reader's logic, the fallback order, a truncated
stream, and the keyframe scan's bounded queue. No FFmpeg, no GPU."""

from __future__ import annotations

import threading
from fractions import Fraction

import numpy as np
import pytest

from chord_core.errors import ConfigError, VideoError
from chord_core.media import packet_index as pi
from chord_core.media.gop import GopRead, plan_gops, snap_to_keyframes, split_reads
from chord_core.media.gop_reader import GopFailed, read_gops
from chord_core.media.nvdec import NvdecReader, nvdec_refusal
from chord_core.media.packet_index import index_from_packets
from chord_core.media.reader_settings import decode_mode, reader_choice
from chord_core.media.readers import (
    CpuPoolReader,
    FrameRead,
    ReaderFailed,
    ReaderUnavailable,
    ReadRequest,
    read_frames_auto,
    reader_chain,
)
from fake_decoder import FakeGopDecoder, FakeNvSession, FakeStream
from chord_core.types import VideoInfo

FPS = 30.0  # 512 ticks of 1/15360 s


def info_for(stream: FakeStream, path: str = "fake.mp4") -> VideoInfo:
    w, h = stream.size_wh
    return VideoInfo(path=path, duration_s=stream.frames / FPS, fps=FPS,
                     frame_count=stream.frames, width=w, height=h, codec="h264",
                     container="mp4", timeline=((0, 0.0, 1 / FPS),))


@pytest.fixture
def fake_file(monkeypatch, tmp_path):
    """A FakeStream whose packet index is what ``packet_index`` returns for its path."""
    def make(stream: FakeStream, codec: str = "h264", pix_fmt: str = "yuv420p") -> VideoInfo:
        path = tmp_path / "fake.mp4"
        path.write_bytes(b"x")
        index = stream.index(codec, pix_fmt)
        monkeypatch.setattr(pi, "packet_index", lambda p: index)
        return info_for(stream, str(path))
    return make


# -- packet index -------------------------------------------------------------------------

def test_index_puts_b_frame_decode_order_into_presentation_order():
    s = FakeStream(frames=90, gop=30)
    idx = s.index()
    assert idx.usable and idx.keyframes == (0, 30, 60)
    assert idx.pts == tuple(s.pts(k) for k in range(90))
    assert idx.time_s(0) == 0.0  # the edit-list shift (first pts −1024) cancels out
    assert idx.time_s(45) == pytest.approx(45 / FPS, abs=1e-9)
    assert idx.index_of_pts(s.pts(7)) == 7 and idx.index_of_pts(s.pts(7) + 1) is None
    assert idx.key_before(59) == 30 and idx.key_before(60) == 60


@pytest.mark.parametrize("packets, why", [
    ([(0, True), (1, False), (0, True), (1, False)], "starts before"),  # restarted clock
    ([(0, True), (None, False), (2, False)], "no timestamp"),
    ([(0, True), (1, False), (1, False)], "share a timestamp"),
    ([(0, False), (1, False)], "no packet is marked"),
])
def test_index_refuses_what_does_not_prove_frame_indices(packets, why):
    idx = index_from_packets(packets, Fraction(1, 1000))
    assert not idx.usable and why in idx.why


# -- GOP planner --------------------------------------------------------------------------

def test_plan_reads_only_the_gops_wanted_frames_need():
    reads = plan_gops([5, 10, 70, 95, 96], [0, 30, 60, 90])
    assert reads == [GopRead(0, (5, 10)), GopRead(60, (70,)), GopRead(90, (95, 96))]
    assert [r.cost for r in reads] == [11, 11, 7]
    assert plan_gops([30, 60], [0, 30, 60])[0].keyframe_only


def test_split_keeps_clip_order_and_balances_cost():
    reads = plan_gops(list(range(0, 600, 7)), list(range(0, 600, 30)))
    parts = split_reads(reads, 4)
    assert len(parts) == 4 and [r for p in parts for r in p] == reads
    costs = [sum(r.cost for r in p) for p in parts]
    assert max(costs) - min(costs) <= 2 * max(r.cost for r in reads)


def test_snap_moves_each_sample_to_a_distinct_nearby_keyframe():
    keys = list(range(0, 900, 60))  # a keyframe every 2 s at 30 fps
    wanted = [20, 130, 250, 260, 899]
    got, moved = snap_to_keyframes(wanted, keys, lambda k: k / FPS, max_move_s=1.0)
    # 260: keyframe 240 is taken, 300 is 1.33 s away: kept; 899: 840 is 1.97 s away: kept
    assert got == (0, 120, 240, 260, 899)
    assert moved == pytest.approx((-20 / FPS, -10 / FPS, -10 / FPS, 0.0, 0.0))
    assert all(b > a for a, b in zip(got, got[1:]))
    assert all(abs(m) <= 1.0 + 1e-9 for m in moved)


def test_snap_keeps_a_sample_with_no_keyframe_near():
    got, moved = snap_to_keyframes([100, 200], [0, 300], lambda k: k / FPS, max_move_s=0.5)
    assert got == (100, 200) and moved == (0.0, 0.0)


# -- keyframe-to-keyframe reading over the fake decoder ------------------------------------

def test_gop_read_decodes_no_frame_after_the_last_wanted_one():
    s = FakeStream(frames=120, gop=30)
    idx = s.index()
    out = read_gops(FakeGopDecoder(s), idx.pts, plan_gops([3, 40, 41], idx.keyframes),
                    (16, 8), 0)
    assert sorted(out.frames) == [3, 40, 41]
    assert all(int(out.frames[k][0, 0, 0]) == k for k in out.frames)  # the right pictures
    assert s.decoded == [0, 1, 2, 3] + list(range(30, 42))  # GOPs 60 and 90: never decoded


def test_keyframe_samples_decode_one_frame_each(fake_file):
    s = FakeStream(frames=300, gop=30)
    info = fake_file(s)
    got = CpuPoolReader(decoder_factory=lambda p: FakeGopDecoder(s)).read(
        ReadRequest(info, (0, 60, 150, 270), (16, 8)))
    assert s.decoded == [0, 60, 150, 270]
    assert got.indices == (0, 60, 150, 270) and got.frames.shape == (4, 8, 16, 3)
    assert got.times_s == pytest.approx((0.0, 2.0, 5.0, 9.0))  # pts − first pts, not k/fps


def test_truncated_stream_gives_the_frames_before_and_says_where(fake_file):
    s = FakeStream(frames=300, gop=30, ends_at=100)
    info = fake_file(s)
    got = CpuPoolReader(decoder_factory=lambda p: FakeGopDecoder(s)).read(
        ReadRequest(info, (10, 50, 95, 120, 200), (16, 8)))
    assert got.indices == (10, 50, 95) and got.stopped_at == 120
    assert "frame 120" in got.warnings()[0]
    assert 200 not in s.decoded  # reading stopped at the damage


def test_a_seek_that_lands_late_is_caught_not_misplaced():
    s = FakeStream(frames=120, gop=30, land_late=True)
    idx = s.index()
    with pytest.raises(GopFailed, match="frame 5"):
        read_gops(FakeGopDecoder(s), idx.pts, plan_gops([5], idx.keyframes), None, 0)


# -- NVDEC reader over fake sessions --------------------------------------------------------

def nvdec(s: FakeStream, sessions: list[FakeNvSession], decoders: int = 4) -> NvdecReader:
    def factory(name: str, gpu: int) -> FakeNvSession:
        sessions.append(FakeNvSession(s, name, gpu))
        return sessions[-1]
    return NvdecReader(decoders, factory=factory, device="cpu")


def test_nvdec_reader_spreads_gops_over_sessions_and_checks_pts(fake_file):
    s = FakeStream(frames=600, gop=30, size_wh=(64, 48))
    info = fake_file(s)
    sessions: list[FakeNvSession] = []
    want = tuple(range(5, 600, 30))
    got = nvdec(s, sessions).read(ReadRequest(info, want, (32, 24)))
    assert got.reader == "nvdec" and got.indices == want
    assert isinstance(got.frames, np.ndarray) and got.frames.shape == (20, 24, 32, 3)
    assert [int(f[0, 0, 0]) for f in got.frames] == [k % 256 for k in want]
    assert got.times_s == pytest.approx([k / FPS for k in want], abs=1e-6)
    # frame 0 once (NVDEC's pts shift for this file), the first call of its session
    assert sum(x.asked.count([0]) for x in sessions) == 1
    assert [x.asked[0] for x in sessions if [0] in x.asked] == [[0]]
    asked = [a for x in sessions for a in x.asked if a != [0]]
    assert len(sessions) == 4 and sorted(k for a in asked for k in a) == list(want)


def test_nvdec_frames_can_stay_a_tensor_on_the_device(fake_file):
    import torch

    s = FakeStream(frames=60, gop=30)
    got = nvdec(s, []).read(ReadRequest(fake_file(s), (1, 2), (32, 24), model_device="cpu"))
    assert isinstance(got.frames, torch.Tensor) and got.frames.dtype == torch.uint8
    assert tuple(got.frames.shape) == (2, 24, 32, 3)


def test_nvdec_numbering_that_disagrees_with_the_index_fails_over(fake_file):
    s = FakeStream(frames=60, gop=30, renumber_from=20)
    with pytest.raises(ReaderFailed, match="frame 25 has pts"):
        nvdec(s, []).read(ReadRequest(fake_file(s), (1, 25), (32, 24)))


def test_nvdec_edit_list_shift_is_one_constant_not_a_failure(fake_file):
    # on an H200, PyNvVideoCodec gave frame 0 pts −1024 where PyAV's index says 0
    s = FakeStream(frames=90, gop=30, pts0=0, pts_shift=-1024)
    got = nvdec(s, []).read(ReadRequest(fake_file(s), (3, 40, 80), (32, 24)))
    assert got.indices == (3, 40, 80)
    assert got.times_s == pytest.approx((3 / FPS, 40 / FPS, 80 / FPS), abs=1e-6)


def test_nvdec_truncated_stream_stops_where_the_file_ends(fake_file):
    s = FakeStream(frames=300, gop=30, ends_at=50)
    got = nvdec(s, [], decoders=1).read(ReadRequest(fake_file(s), (10, 40, 80), (32, 24)))
    assert got.indices == (10, 40) and got.stopped_at == 80


@pytest.mark.parametrize("codec, fmt, wh, phrase", [
    ("mpeg4", "yuv420p", (640, 480), "does not decode mpeg4"),
    ("h264", "yuv420p10le", (640, 480), "yuv420p10le"),
    ("h264", "yuv422p", (640, 480), "yuv422p"),
    ("h264", "yuv420p", (641, 480), "641×480"),
    ("h264", "yuv420p", (32, 32), "32×32"),
])
def test_streams_nvdec_cannot_decode_are_refused_with_the_reason(codec, fmt, wh, phrase):
    assert phrase in nvdec_refusal(codec, fmt, wh)
    assert nvdec_refusal("h264", "yuv420p", (1280, 720)) is None


# -- the fallback order ----------------------------------------------------------------------

class Recorder:
    def __init__(self, name: str, exc: Exception | None = None) -> None:
        self.name, self.exc, self.calls = name, exc, 0

    def read(self, req: ReadRequest) -> FrameRead:
        self.calls += 1
        if self.exc is not None:
            raise self.exc
        return FrameRead(np.zeros((1, 2, 2, 3), np.uint8), req.indices[:1], (0.0,), self.name)


def test_order_is_nvdec_then_the_cpu_pool_then_the_default_reader():
    assert [r.name for r in reader_chain("auto")] == ["nvdec", "cpu-pool", "default"]
    assert [r.name for r in reader_chain("cpu-pool")] == ["cpu-pool", "default"]
    assert [r.name for r in reader_chain("default")] == ["default"]
    assert reader_choice({}) == "auto"
    with pytest.raises(ConfigError, match="CHORD_READER"):
        reader_choice({"CHORD_READER": "gpu"})


def test_an_mpeg4_stream_falls_back_with_a_note(fake_file):
    s = FakeStream(frames=60, gop=30)
    info = fake_file(s, codec="mpeg4")
    pool = CpuPoolReader(decoder_factory=lambda p: FakeGopDecoder(s))
    default = Recorder("default")
    got = read_frames_auto(ReadRequest(info, (3, 33), (16, 8)), [nvdec(s, []), pool, default])
    assert got.reader == "cpu-pool" and default.calls == 0
    assert got.note == "read by cpu-pool; nvdec not used: NVDEC does not decode mpeg4"


def test_chord_decode_fast_is_the_pool_readers_choice_and_its_note_says_so(fake_file,
                                                                           monkeypatch):
    """``CHORD_DECODE=fast`` reaches the CPU pool reader (its decoders take FFmpeg's two
    shortcuts: tests/integration/test_readers_real.py) and every result of it says so in
    its note and in the CLI's reader line; unset, the read is exact and says nothing."""
    from chord_core.media.readers import reader_line

    s = FakeStream(frames=60, gop=30)
    info = fake_file(s)
    req = ReadRequest(info, (3, 33), (16, 8))
    chain = [Recorder("nvdec", ReaderUnavailable("no CUDA GPU here")),
             CpuPoolReader(decoder_factory=lambda p: FakeGopDecoder(s))]
    exact = read_frames_auto(req, chain)
    assert exact.stats["decode"] == "exact" and exact.note == \
        "read by cpu-pool; nvdec not used: no CUDA GPU here"
    monkeypatch.setenv("CHORD_DECODE", "FAST")
    fast = read_frames_auto(req, chain)
    assert fast.stats["decode"] == "fast" and np.array_equal(fast.frames, exact.frames)
    assert fast.note.startswith("read by cpu-pool; fast decode (CHORD_DECODE=fast)")
    assert fast.note.endswith("; nvdec not used: no CUDA GPU here")
    assert reader_line([(fast.reader, fast.note)]).startswith("reader: cpu-pool (fast decode")
    assert CpuPoolReader(decoder_factory=lambda p: FakeGopDecoder(s),
                         fast=False).read(req).stats["decode"] == "exact"  # said outright
    assert decode_mode({}) == "exact"
    with pytest.raises(ConfigError, match="CHORD_DECODE must be one of exact, fast"):
        decode_mode({"CHORD_DECODE": "quick"})


def test_a_reader_that_fails_midway_hands_the_whole_read_on(fake_file):
    s = FakeStream(frames=60, gop=30, land_late=True)
    info = fake_file(s)
    pool = CpuPoolReader(decoder_factory=lambda p: FakeGopDecoder(s))
    default = Recorder("default")
    got = read_frames_auto(ReadRequest(info, (3,), None),
                           [Recorder("nvdec", ReaderUnavailable("no CUDA GPU here")), pool,
                            default])
    assert got.reader == "default" and default.calls == 1
    assert got.note.startswith("read by default; nvdec not used: no CUDA GPU here; "
                               "cpu-pool failed: frame 3")


def test_when_no_reader_can_the_error_says_why_each_did_not(fake_file):
    info = fake_file(FakeStream(frames=60))
    with pytest.raises(VideoError, match="a not used: no; b failed: broke"):
        read_frames_auto(ReadRequest(info, (1,), None),
                         [Recorder("a", ReaderUnavailable("no")),
                          Recorder("b", ReaderFailed("broke"))])


# -- the keyframe scan's queue ---------------------------------------------------------------

def test_keyframe_scan_reads_ahead_through_a_bounded_queue(fake_file, monkeypatch):
    from chord_core.longvideo import scenes
    from chord_core.media import readers

    s = FakeStream(frames=30 * 2000, gop=30)
    info = fake_file(s)
    asked: list[tuple[int, ...]] = []
    started = threading.Event()

    def fake_read(req: ReadRequest, chain=None) -> FrameRead:
        asked.append(req.indices)
        started.set()
        n = len(req.indices)
        return FrameRead(np.zeros((n, 36, 64, 3), np.uint8), req.indices,
                         tuple(k / FPS for k in req.indices), "fake")

    monkeypatch.setattr(readers, "read_frames_auto", fake_read)
    frames = scenes.keyframe_frames(info)
    first = next(frames)
    started.wait(5)
    deadline = threading.Event()
    deadline.wait(0.3)  # let the producer run as far ahead as the queue allows
    assert first[0] == 0
    # one batch consumed, SCAN_QUEUE waiting, one more held by the blocked producer at most
    assert len(asked) <= 2 + scenes.SCAN_QUEUE
    assert all(len(a) <= scenes.SCAN_BATCH for a in asked)
    rest = list(frames)
    assert [k for k, _, _ in [first] + rest] == list(range(0, 30 * 2000, 30))


def test_the_reader_line_names_the_reader_and_why_the_faster_ones_did_not():
    from chord_core.media.readers import reader_line

    why = "nvdec not used: PyNvVideoCodec is not installed (No module named 'x')"
    assert reader_line([("cpu-pool", f"read by cpu-pool; {why}")]) == f"reader: cpu-pool ({why})"
    assert reader_line([("default", "read by default")]) == "reader: default"
    mixed = reader_line([("nvdec", "read by nvdec")] * 3 + [
        ("cpu-pool", "read by cpu-pool; nvdec failed: NVDEC's frame 5 has pts 1")])
    assert mixed == "reader: nvdec for 3 of 4 reads, cpu-pool for 1 of 4 reads"
    assert reader_line([]).startswith("reader: none")


def test_closing_the_pool_ends_its_threads_and_lets_every_session_go(fake_file):
    """At exit the process's sessions are released by ``close`` (their threads finish and
    end), not left to the interpreter's teardown."""
    import gc
    import threading
    import weakref

    s = FakeStream(frames=600, gop=30, size_wh=(64, 48))
    info = fake_file(s)
    sessions: list[FakeNvSession] = []
    reader = nvdec(s, sessions)
    before = set(threading.enumerate())  # other tests' readers linger too
    reader.read(ReadRequest(info, tuple(range(5, 600, 30)), (32, 24)))
    refs = [weakref.ref(x) for x in sessions]
    sessions.clear()
    gc.collect()
    assert len(refs) == 4 and all(r() is not None for r in refs)  # kept for the next read
    threads = [t for t in set(threading.enumerate()) - before
               if t.name.startswith("chord-nvdec")]
    assert threads  # lingering, waiting for the next read
    reader.pool.close(wait_s=5.0)
    assert not any(t.is_alive() for t in threads)
    gc.collect()
    assert all(r() is None for r in refs)


def test_the_shared_reader_is_closed_at_exit_once_made(monkeypatch):
    import atexit

    from chord_core.media import nvdec as nv

    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(nv, "_SHARED", {})
    reader = nv.shared_reader()
    assert nv.shared_reader() is reader and registered == [nv.close_shared]
    closed = []
    monkeypatch.setattr(reader.pool, "close", closed.append)
    nv.close_shared()
    assert closed == [nv.CLOSE_WAIT_S] and nv._SHARED == {}
    nv.close_shared()  # nothing left: nothing to do
    assert closed == [nv.CLOSE_WAIT_S]
