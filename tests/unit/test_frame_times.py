"""frame_times: container ticks → seconds, warnings that say how far off, compact runs; and
VideoInfo.time_of reading them back (pure, no files)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from chord_core.media.frame_times import (
    TIME_TOLERANCE_S,
    FrameTimes,
    analyse,
    compact,
    same_times,
)
from chord_core.media.sampling import adopt_decoded_times
from chord_core.types import SamplingPlan, VideoInfo

MS = Fraction(1, 1000)
TB90K = Fraction(1, 90000)


def _ticks(times_s: list[float], tb: Fraction = TB90K) -> tuple[int, ...]:
    return tuple(int(round(t / tb)) for t in times_s)


CFR = [i / 25 for i in range(50)]
RNG = np.random.default_rng(0)

COMPACT = {  # id → (times, most runs allowed)
    "constant-rate": (CFR, 1),
    "ntsc-ms-clock": ([round(i * 1001 / 30) / 1000 for i in range(900)], 1),
    "jump": (CFR[:25] + [100 + t for t in CFR[:25]], 2),
    "three-rates": ([i * 0.1 for i in range(10)] + [1 + i * 0.05 for i in range(10)]
                    + [1.5 + i * 0.02 for i in range(10)], 3),
    "jittery-phone": (list(np.cumsum(RNG.uniform(0.030, 0.037, 300))), 300),
    "one-frame": ([0.0], 1),
}


@pytest.mark.parametrize("case", COMPACT, ids=list(COMPACT))
def test_compact_reproduces_every_time(case: str) -> None:
    times, most = COMPACT[case]
    runs = compact(times)
    assert 1 <= len(runs) <= most
    info = VideoInfo(path="x", duration_s=1, fps=25, frame_count=len(times), width=2, height=2,
                     timeline=runs)
    again = VideoInfo.from_dict(info.to_dict())
    for k, t in enumerate(times):
        assert abs(again.time_of(k) - t) <= TIME_TOLERANCE_S + 1e-6, (k, again.time_of(k), t)


ANALYSE = {  # id → (times, restarts, header fps, phrases (one warning each, unless joined
    # by "|" into one), variable)
    "clean": (CFR, (), 25.0, [], False),
    "jump": (CFR[:25] + [101 + t for t in CFR[:25]], (), 25.0,
             ["timestamps jump by +100.0 s after frame 24 (0.96 s)"], False),
    "many-jumps": ([0, 0.04, 5, 5.04, 10, 10.04, 15, 15.04, 20, 20.04], (), 25.0,
                   ["and 1 more"], False),
    "backward": ([10 + t for t in CFR[:25]] + [2 + t for t in CFR[:25]], (25,), 25.0,
                 ["go back by 9.0 s after frame 24|off by 9.00 s"], False),
    "duplicate": (CFR[:10] + [CFR[9]] + CFR[10:20], (), 25.0,
                  ["1 frame(s) share a timestamp"], False),
    "vfr": ([0, 0.05, 0.15, 0.3, 0.35, 0.45, 0.6, 0.65, 0.75, 0.9], (), 10.0,
            ["variable frame rate (frame intervals 50–150 ms)"], True),
    "header-lies": (CFR, (), 90000.0, ["the header says 90000 fps|up to 1.96 s"], False),
    "header-rounded-long": ([i * 1001 / 30000 for i in range(18000)], (), 30.0,
                            ["the header says 30 fps|up to 0.60 s"], False),
}


@pytest.mark.parametrize("case", ANALYSE, ids=list(ANALYSE))
def test_analyse_says_how_far_off(case: str) -> None:
    times, restarts, header, phrases, variable = ANALYSE[case]
    got = analyse(FrameTimes(_ticks(times), TB90K, restarts), header)
    assert got is not None
    assert got.variable is variable
    assert len(got.warnings) == len(phrases), got.warnings
    for joined in phrases:
        assert any(all(p in w for p in joined.split("|")) for w in got.warnings), \
            (joined, got.warnings)
    steps = np.diff(got.times_s)
    assert np.all(steps >= 0)  # monotonic whatever the container says
    if not restarts:
        assert np.allclose(got.times_s, np.asarray(times) - times[0], atol=1e-5)


def test_analyse_needs_two_distinct_times() -> None:
    assert analyse(FrameTimes((5,), MS), 25) is None
    assert analyse(FrameTimes((5, 5), MS), 25) is None


def test_incomplete_read_says_later_times_are_extrapolated() -> None:
    got = analyse(FrameTimes(_ticks(CFR), TB90K, complete=False), 25.0)
    assert got is not None and any("probe limit" in w for w in got.warnings)


@pytest.mark.parametrize("decoded_ms,same", [
    ([i * 40.0 for i in range(10)], True),
    ([i * 40.0 + 1.0 for i in range(10)], True),  # OpenCV counts from the stream start
    ([i * 20.0 for i in range(10)], False),  # two packets per frame (field pictures)
    ([], True),
], ids=["equal", "offset", "fields", "nothing-decoded"])
def test_packet_times_checked_against_decoded_frames(decoded_ms: list[float],
                                                     same: bool) -> None:
    ft = FrameTimes(_ticks([i * 0.04 for i in range(10)]), TB90K)
    assert same_times(ft, tuple(decoded_ms)) is same


def test_time_of_without_timeline_is_index_over_fps() -> None:
    info = VideoInfo(path="x", duration_s=2, fps=25, frame_count=50, width=2, height=2)
    assert info.time_of(10) == pytest.approx(0.4)


ADOPT = {  # id → (planned, decoded, adopted?)
    "agree": ((0.0, 0.5, 1.0), (0.0, 0.5004, 1.0), False),
    "differ": ((0.0, 0.5, 1.0), (0.0, 0.6, 1.3), True),
    "not-increasing": ((0.0, 0.5, 1.0), (0.0, 5.0, 1.0), False),  # a clock that went back
    "missing-times": ((0.0, 0.5, 1.0), (0.0, float("nan"), 1.0), False),
    "wrong-length": ((0.0, 0.5, 1.0), (0.0, 0.6), False),
}


@pytest.mark.parametrize("case", ADOPT, ids=list(ADOPT))
def test_decoded_times_adopted_only_when_usable_and_different(case: str) -> None:
    planned, decoded, adopted = ADOPT[case]
    plan = SamplingPlan(task="ground", fps=2, frame_indices=(0, 5, 10), timestamps_s=planned,
                        input_wh=(28, 28), visual_tokens=3)
    got, note = adopt_decoded_times(plan, decoded)
    assert (note is not None) is adopted
    assert got.timestamps_s == (tuple(decoded) if adopted else planned)
    if adopted:
        assert "by up to 0.300 s" in note
