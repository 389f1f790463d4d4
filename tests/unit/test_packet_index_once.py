"""The packet index of a file is scanned once when reads ask for it together (a worker's
batch and its read-ahead: four reads of an hour at once each demuxed it again), and each
caller gets that scan's index; a file changed since is scanned again."""

from __future__ import annotations

import threading
import time

from chord_core.media import packet_index as pi


def test_reads_asking_together_wait_for_one_scan(tmp_path, monkeypatch) -> None:
    clip = tmp_path / "hour.mp4"
    clip.write_bytes(b"not read: the scan is counted, not run")
    calls: list[str] = []
    start = threading.Barrier(4)

    def scan(p):
        calls.append(str(p))
        time.sleep(0.3)  # long enough for the other three to arrive meanwhile
        return object()

    monkeypatch.setattr(pi, "_scan", scan)
    monkeypatch.setattr(pi, "_cache", type(pi._cache)())
    got: list[object] = []

    def ask() -> None:
        start.wait()
        got.append(pi.packet_index(clip))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(got) == 4 and len({id(g) for g in got}) == 1
    clip.write_bytes(b"changed: another size, another key")
    assert pi.packet_index(clip) is not got[0] and len(calls) == 2
    assert not pi._building  # nothing left behind


def test_a_scan_that_raises_leaves_nothing_behind_and_the_next_read_scans_again(
        tmp_path, monkeypatch) -> None:
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"scanned by the fake below")
    outcomes: list[object] = [OSError("the disk went away mid-scan"), "the index"]

    def scan(p):
        got = outcomes.pop(0)
        if isinstance(got, BaseException):
            raise got
        return got

    monkeypatch.setattr(pi, "_scan", scan)
    monkeypatch.setattr(pi, "_cache", type(pi._cache)())
    try:
        pi.packet_index(clip)
    except OSError:
        pass
    else:
        raise AssertionError("the scan's error should reach its caller")
    assert not pi._building
    assert pi.packet_index(clip) == "the index" and not outcomes
