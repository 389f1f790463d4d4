"""NVDEC sessions outlive a read (issue 34's profile: every product read opened its own
sessions), each is used by its own thread only (reads at once share the file's sessions),
and they go forward through the file (PyNvVideoCodec reopens the file when a session is
asked for a frame at or before its last). Fake sessions at the decoder boundary
(``fake_decoder.py``)."""

from __future__ import annotations

import threading
import time

import pytest

from chord_core.media import readers
from chord_core.media.nvdec import NvdecReader, shared_reader
from chord_core.media.reader_types import ReaderFailed, ReadRequest
from fake_decoder import FakeNvSession, FakeStream, fake_clip

FPS = 30.0


@pytest.fixture
def clip(monkeypatch, tmp_path):
    return lambda stream: fake_clip(stream, monkeypatch, tmp_path, FPS)


def reader(stream: FakeStream, made: list, session=FakeNvSession) -> NvdecReader:
    def factory(name: str, gpu: int):
        made.append(session(stream, name, gpu))
        return made[-1]
    return NvdecReader(4, factory=factory, device="cpu")


def never_backwards(made: list[FakeNvSession]) -> bool:
    return all(min(b) > max(a) for x in made for a, b in zip(x.asked, x.asked[1:]))


def test_the_product_reads_share_one_reader_and_its_sessions(clip):
    assert readers.reader_chain("nvdec")[0] is readers.reader_chain("auto")[0] is \
        shared_reader()
    s, made = FakeStream(frames=600, gop=30), []
    r, info = reader(s, made), clip(s)
    for start in (0, 120, 240):
        r.read(ReadRequest(info, tuple(range(start, start + 120, 3)), (32, 24)))
    assert len(made) == 4  # opened by the first read, kept for the next two
    assert never_backwards(made)


def test_a_read_behind_the_sessions_opens_new_ones_instead_of_going_back(clip):
    s, made = FakeStream(frames=900, gop=30), []
    r, info = reader(s, made), clip(s)
    r.read(ReadRequest(info, tuple(range(600, 620)), (32, 24)))  # one GOP: one session
    assert len(made) == 1
    r.read(ReadRequest(info, tuple(range(0, 300, 5)), (32, 24)))  # 10 GOPs, all behind it
    assert len(made) == 4 and r.pool.stats["backward"] == 0  # 3 new ones took them
    assert sum(x.reopens for x in made) == 0
    r.read(ReadRequest(info, tuple(range(300, 600, 5)), (32, 24)))  # all 4 are behind it
    assert len(made) == 4 and r.pool.stats["backward"] == 0 and r.pool.stats["reused"] >= 3
    assert never_backwards(made)
    r.read(ReadRequest(info, tuple(range(0, 60, 5)), (32, 24)))  # behind all 4, at the cap
    assert len(made) == 4 and r.pool.stats["backward"] == 2  # 2 GOPs: back, counted
    assert sum(x.reopens for x in made) == 2


def test_a_call_asks_at_most_128_mib_of_frames():
    from chord_core.media.nvdec import frames_per_call

    assert [frames_per_call(wh) for wh in ((64, 48), (1280, 720), (1920, 1080),
                                           (3840, 2160))] == [64, 48, 21, 5]


class OneAtATime(FakeNvSession):
    """Fails the test's check when two threads use the session at once."""

    clashes = 0

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        self.busy = threading.Lock()

    def get_batch_frames_by_index(self, indices):
        if not self.busy.acquire(blocking=False):
            OneAtATime.clashes += 1
            return super().get_batch_frames_by_index(indices)
        try:
            time.sleep(0.002)
            return super().get_batch_frames_by_index(indices)
        finally:
            self.busy.release()


def test_reads_at_once_never_share_a_session(clip):
    s, made = FakeStream(frames=600, gop=30), []
    r, info = reader(s, made, OneAtATime), clip(s)
    r.read(ReadRequest(info, (0, 1), (32, 24)))  # the file's pts shift, once
    errors: list[BaseException] = []
    got: dict[int, tuple] = {}

    def go(start: int) -> None:
        try:
            got[start] = r.read(ReadRequest(info, tuple(range(start, start + 200, 4)),
                                            (32, 24))).indices
        except BaseException as exc:  # noqa: BLE001 — the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(k * 200,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and OneAtATime.clashes == 0
    assert got == {k: tuple(range(k, k + 200, 4)) for k in (0, 200, 400)}
    assert len(made) == 4  # the reads at once shared the file's 4 sessions
    assert r.pool.sessions(next(iter(r.pool._files))) == 4


def test_a_failed_read_drops_its_sessions(clip):
    s, made = FakeStream(frames=300, gop=30, renumber_from=100), []
    r, info = reader(s, made), clip(s)
    with pytest.raises(ReaderFailed):
        r.read(ReadRequest(info, tuple(range(90, 200, 2)), (32, 24)))
    key = next(iter(r.pool._files))
    opened = len(made)
    assert r.pool.sessions(key) < opened  # the sessions that failed are not kept
    got = r.read(ReadRequest(info, tuple(range(0, 60, 2)), (32, 24)))
    assert got.indices == tuple(range(0, 60, 2)) and r.pool.sessions(key) >= 1
