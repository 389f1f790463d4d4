"""Time left from the plan's whole cost (learned from finished jobs) or the last loop's own
rate, counted down between events; "estimating" (None) where no honest figure exists."""

from __future__ import annotations

import pytest

from chord_core.types import ProgressEvent
from chord_ui.eta import Rate, counted_down, learn_rates, left_at_event


def _ev(stage: str, done: int, total: int, t: float) -> ProgressEvent:
    return ProgressEvent(stage, "", done, total, t)


def _doc(model: str, task: str, total: float, load: float, tokens: int,
         partial: bool = False) -> dict:
    return {"model": {"id": model}, "task": task, "partial": partial,
            "timing": {"total_s": total, "load_s": load}, "sampling": {"visual_tokens": tokens}}


def test_rates_are_learned_per_model_and_task() -> None:
    rates = learn_rates([_doc("m", "describe", 12.0, 2.0, 1000), _doc("m", "describe", 31.0,
                         1.0, 2000), _doc("m", "ground", 5.0, 0.0, 100),
                         _doc("m", "describe", 1.0, 0.0, 5000, partial=True),
                         _doc("m", "describe", 0.0, 0.0, 0)])
    assert rates[("m", "describe")] == Rate(s_per_token=40.0 / 3000, jobs=2)
    assert rates[("m", "ground")].s_per_token == pytest.approx(0.05)
    assert ("m", "entail") not in rates


RATE = Rate(s_per_token=0.01, jobs=3)  # 3000 tokens: 30 s of work


@pytest.mark.parametrize(("events", "task", "rate", "left"), [
    ([], "describe", RATE, None),
    ([_ev("loading_model", 0, 0, 1.0)], "describe", None, None),
    ([_ev("loading_model", 0, 0, 1.0)], "describe", RATE, 30.0),
    # decoding done, generation to come: the whole plan counts, not the finished loop
    ([_ev("loading_model", 0, 0, 0.0), _ev("decoding", 0, 16, 5.0),
      _ev("decoding", 16, 16, 9.0)], "describe", RATE, 26.0),
    ([_ev("decoding", 0, 16, 0.0), _ev("decoding", 16, 16, 9.0)], "describe", None, None),
    # outran the estimate: estimating again, never "0.0 s left"
    ([_ev("decoding", 0, 16, 0.0), _ev("generating", 0, 0, 45.0)], "describe", RATE, None),
    # grounding's frame loop measured over enough frames takes over
    ([_ev("grounding_frames", 0, 100, 10.0), _ev("grounding_frames", 10, 100, 30.0)],
     "ground", RATE, 180.0),
    ([_ev("grounding_frames", 0, 100, 10.0), _ev("grounding_frames", 2, 100, 11.0)],
     "ground", None, None),
    ([_ev("done", 1, 1, 3.0)], "ground", RATE, None),
], ids=["no-events", "nothing-known", "learned-before-work", "whole-plan-not-the-loop",
        "loop-of-an-earlier-stage", "outran", "ground-loop", "loop-too-short", "done"])
def test_left_at_event(events: list, task: str, rate: Rate | None, left: float | None) -> None:
    got = left_at_event(events, task, 3000, rate)
    assert got == (pytest.approx(left) if left is not None else None)


@pytest.mark.parametrize(("left", "since", "want"), [
    (30.0, 0.0, 30.0), (30.0, 12.5, 17.5), (30.0, 29.5, None), (None, 0.0, None),
], ids=["fresh", "counting-down", "used-up", "unknown"])
def test_counts_down_between_events(left: float | None, since: float,
                                    want: float | None) -> None:
    assert counted_down(left, seen_at=100.0, now=100.0 + since) == want
