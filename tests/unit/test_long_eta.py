"""The long run's time left (issue 39: "6:08 left" for 1:30 of work, frozen between chunks):
fixed sequences of chunk finishes into ``ChunkPace``, the countdown of ``left_now`` between
them, and ``runs._Tally`` writing both into the run's progress document."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chord_core.longvideo.eta import ChunkPace, left_now, work_seconds


def _result(total_s: float, load_s: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(timing=SimpleNamespace(total_s=total_s, load_s=load_s))


# (chunk finishes as (wall time, work seconds), total, resumed, expected eta_s after each)
SEQUENCES = {
    # one worker, 10 chunks of 10 s; the first waited 30 s for the model. The old rate
    # (time since the run began / chunks done) said 40 × 9 = 360 s (6:00) after the first
    "one worker, slow start": ([(40, 10), (50, 10), (60, 10)], 10, 0, [90, 80, 70]),
    # two workers: chunks finish in pairs; the pace is 5 s a chunk once both have
    "two workers": ([(40, 10), (40, 10), (50, 10), (50, 10)], 10, 0, [90, 40, 20 / 3 * 7, 30]),
    # a run resumed with 6 of 10 done: only this run's chunks are timed
    "resumed": ([(100, 8), (108, 8)], 10, 6, [24, 16]),
    # chunks getting slower: the pace follows the measured mean
    "slowing": ([(10, 10), (30, 20), (60, 30)], 6, 0, [50, 60, 60]),
}


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_the_pace_comes_from_the_chunks_own_work(name: str) -> None:
    finishes, total, resumed, expected = SEQUENCES[name]
    pace = ChunkPace(total, resumed)
    assert pace.estimate(resumed) == {"eta_s": None, "eta_at": None, "chunk_s": None}
    got = []
    for n, (at, work) in enumerate(finishes, 1):
        pace.finished(float(at), float(work))
        est = pace.estimate(resumed + n)
        assert est["eta_at"] == at
        got.append(est["eta_s"])
    assert got == pytest.approx(expected, abs=0.01)


def test_the_time_left_counts_down_between_chunks_and_holds_when_one_is_late() -> None:
    est = {"eta_s": 90.0, "eta_at": 1000.0, "chunk_s": 10.0}
    seen = [left_now(est, 1000.0 + s) for s in (0, 1, 4, 9.5, 10, 25, 300)]
    assert seen == pytest.approx([90, 89, 86, 80.5, 80, 80, 80])  # held at the next 8 chunks
    last = {"eta_s": 10.0, "eta_at": 1000.0, "chunk_s": 10.0}  # only the last chunk left
    assert left_now(last, 1004.0) == pytest.approx(6.0)
    assert left_now(last, 1011.0) is None  # it runs late: "estimating", not "0 s"
    assert left_now({"eta_s": None}, 5.0) is None
    assert left_now({"eta_s": 93.5}, 1e9) == 93.5  # an older run's document: as written


def test_work_is_the_results_time_without_the_models_load() -> None:
    assert work_seconds(_result(42.0, load_s=30.0)) == 12.0
    assert work_seconds(_result(5.0, load_s=9.0)) == 0.0
    assert work_seconds(object()) == 0.0


def test_the_tally_writes_the_estimate_into_the_runs_progress(monkeypatch) -> None:
    from chord_core.longvideo import runs

    clock = iter([1040.0, 1050.0])
    monkeypatch.setattr(runs.time, "time", lambda: next(clock))
    events = []
    tally = runs._Tally(10, 0, "chunks", events.append)
    first = tally.tick()
    assert (first["done"], first["eta_s"]) == (0, None)
    tally.finished([_result(40.0, load_s=30.0)])  # waited for the model: 10 s of work
    tally.done += 1
    doc = tally.tick()
    assert (doc["done"], doc["eta_s"], doc["eta_at"], doc["chunk_s"]) == (1, 90.0, 1040.0,
                                                                          10.0)
    tally.finished([_result(10.0)])
    tally.done += 1
    doc = tally.tick()
    assert (doc["done"], doc["eta_s"]) == (2, 80.0)
    assert "about 80 s left" in events[-1].message


def test_a_batch_of_chunks_finishing_together_is_timed_before_its_first_tick(monkeypatch):
    """A worker that ran five chunks in one 20 s batch: each chunk's own time is the whole
    batch's, so timed one at a time the first tick said 20 s a chunk (11 × 20 = 220 s)."""
    from chord_core.longvideo import runs

    monkeypatch.setattr(runs.time, "time", lambda: 1020.0)
    tally = runs._Tally(12, 0, "chunks", None)
    tally.finished([_result(20.0)] * 5)
    ticks = []
    for _ in range(5):
        tally.done += 1
        ticks.append(tally.tick()["eta_s"])
    assert ticks == pytest.approx([44.0, 40.0, 36.0, 32.0, 28.0])  # 4 s a chunk
