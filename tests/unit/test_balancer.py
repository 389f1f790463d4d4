"""Balancer: cost model, weighted least-loaded choice, throughput correction, splitting."""

from __future__ import annotations

import pytest

from chord_core.runtime.balancer import Balancer, legacy_cost, plan_cost
from chord_core.types import SamplingPlan, VideoInfo


def _plan(task: str, frames: int, tokens: int) -> SamplingPlan:
    return SamplingPlan(task=task, fps=2.0, frame_indices=tuple(range(frames)),
                        timestamps_s=tuple(i / 2 for i in range(frames)), input_wh=(448, 252),
                        visual_tokens=tokens)


def test_costs_grow_with_tokens_frames_and_output():
    small, big = _plan("describe", 8, 1000), _plan("describe", 30, 5000)
    assert plan_cost(big, 512) > plan_cost(small, 512)
    assert plan_cost(small, 1024) > plan_cost(small, 128)
    assert plan_cost(_plan("ground", 60, 60 * 144), 0) > plan_cost(_plan("ground", 30, 30 * 144), 0)


def test_legacy_cost_formula():
    v = VideoInfo(path="x", duration_s=10, fps=60, frame_count=600, width=1920, height=1080)
    assert legacy_cost(v) == pytest.approx(10 * 2.0736 * 2)


def test_equal_weights_alternate_and_weighted_cards_get_more():
    b = Balancer({"gpu0": 1.0, "gpu1": 1.0})
    picks = [b.choose(10) for _ in range(4)]
    assert picks.count("gpu0") == 2 and picks.count("gpu1") == 2
    w = Balancer({"gpu0": 1.0, "gpu1": 0.5})
    picks = [w.choose(10) for _ in range(9)]
    assert picks.count("gpu0") == 6 and picks.count("gpu1") == 3


def test_measured_throughput_corrects_speed():
    b = Balancer({"a": 1.0, "b": 1.0})
    for _ in range(10):
        b.finished("a", 100, 1.0)   # a does 100 cost/s
        b.finished("b", 100, 4.0)   # b is 4× slower
    s = b.speeds()
    assert s["a"] > 2 * s["b"]
    picks = [b.choose(10) for _ in range(10)]
    assert picks.count("a") >= 7


@pytest.mark.parametrize(("weights", "n", "expected"), [
    ({"a": 1.0, "b": 1.0}, 60, [("a", 0, 30), ("b", 30, 60)]),
    ({"a": 2.0, "b": 1.0}, 60, [("a", 0, 40), ("b", 40, 60)]),
    ({"a": 1.0, "b": 1.0, "c": 1.0}, 2, None),
    ({"a": 1.0}, 7, [("a", 0, 7)]),
], ids=["even", "weighted", "fewer-items-than-workers", "single"])
def test_split_is_contiguous_and_complete(weights, n, expected):
    parts = Balancer(weights).split(n, list(weights))
    covered = [i for _, s, e in parts for i in range(s, e)]
    assert covered == list(range(n))
    if expected is not None:
        assert parts == expected


def test_adjustment_zero_keeps_configured_weights():
    b = Balancer({"a": 1.0, "b": 1.0})
    b.set_adjustment(0.0)
    for _ in range(5):
        b.finished("a", 100, 1.0)
        b.finished("b", 100, 4.0)
    assert b.speeds() == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize(("n", "align", "expected"), [
    (60, 8, [("a", 0, 32), ("b", 32, 60)]),
    (60, 1, [("a", 0, 30), ("b", 30, 60)]),
    (10, 8, [("a", 0, 5), ("b", 5, 10)]),  # too few items to align: plain halves
], ids=["aligned-to-batch", "unaligned", "too-few-to-align"])
def test_split_aligns_to_batch_boundaries(n, align, expected):
    assert Balancer({"a": 1.0, "b": 1.0}).split(n, ["a", "b"], align=align) == expected


def test_check_interval_delays_corrections_and_max_adjustment_bounds_them() -> None:
    b = Balancer({"a": 1.0, "b": 1.0})
    b.set_adjustment(0.5, check_interval_s=3600)
    b.finished("a", 100.0, 1.0)
    b.finished("b", 100.0, 10.0)  # b measured 10x slower, but no check is due yet
    assert b.speeds() == {"a": 1.0, "b": 1.0}
    b.set_adjustment(1.0, check_interval_s=0, max_correction=0.3)
    b.finished("a", 100.0, 1.0)
    speeds = b.speeds()
    assert speeds["a"] == pytest.approx(1.3) and speeds["b"] == pytest.approx(0.7)
