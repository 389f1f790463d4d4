"""Groups take turns on a worker (``runtime/fairness.py``): a parent job that queued much at
once (a live stream's backlog of chunks, a batch) no longer holds the worker until its
backlog is done; inside a group, and among jobs of their own, the order is kept.

The manager test runs the real manager and worker loop (threads) with the engine replaced
at its boundary by a fake that records what it ran."""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.fairness import MAX_GROUPS, FairShare
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video
from tests.unit.fake_engine import LoadedEngine


def _drain(fair: FairShare, queued: list[tuple[str, str]]) -> list[str]:
    """Take every task of a queue of (task id, group) pairs, in the order the worker would."""
    tasks = {tid: SimpleNamespace(group=group) for tid, group in queued}
    queue = deque(tid for tid, _ in queued)
    order = []
    while (tid := fair.take(queue, tasks)) is not None:
        order.append(tid)
    return order


@pytest.mark.parametrize(("queued", "expected"), [
    ([("a1", "A"), ("a2", "A"), ("a3", "A"), ("b1", "B"), ("b2", "B")],
     ["a1", "b1", "a2", "b2", "a3"]),
    ([("x", "x"), ("y", "y"), ("z", "z")], ["x", "y", "z"]),
    ([("a1", "A"), ("a2", "A"), ("a3", "A"), ("lone", "lone"), ("b1", "B")],
     ["a1", "lone", "b1", "a2", "a3"]),
    ([("a1", "A"), ("a2", "A")], ["a1", "a2"]),
], ids=["two-streams-alternate", "lone-jobs-keep-their-order", "a-lone-job-takes-its-turn",
        "one-group-in-order"])
def test_groups_take_turns_and_keep_their_order(queued, expected) -> None:
    assert _drain(FairShare(), queued) == expected


def test_a_group_served_before_waits_behind_one_never_served() -> None:
    fair = FairShare()
    fair.served("A")  # A ran a chunk a moment ago; B queued its first since
    assert _drain(fair, [("a2", "A"), ("a3", "A"), ("b1", "B")]) == ["b1", "a2", "a3"]


def test_the_groups_remembered_are_bounded() -> None:
    fair = FairShare()
    for i in range(MAX_GROUPS + 50):
        fair.served(f"job-{i}")
    assert len(fair._last) == MAX_GROUPS
    assert "job-0" not in fair._last and f"job-{MAX_GROUPS + 49}" in fair._last


def test_an_empty_queue_gives_nothing() -> None:
    assert FairShare().take(deque(), {}) is None


class OrderEngine(LoadedEngine):
    """Records the query of each grounding it runs; the query 'block' waits on a gate."""

    ran: list[str] = []
    gate = threading.Event()

    def analyze(self, request, *, on_progress=None, cancel=None, **_planned):
        if request.query == "block":
            OrderEngine.gate.wait(30)
        OrderEngine.ran.append(request.query)
        return f"result:{request.query}"


def test_two_streams_and_a_clip_share_one_worker(tmp_path: Path) -> None:
    """One worker busy; stream A queues six chunks, stream B two, then a clip of its own:
    once the worker is free they take turns (A, B, the clip, A, B, then A's backlog), where
    first in, first out ran all six of A's before B's first."""
    OrderEngine.ran, OrderEngine.gate = [], threading.Event()
    clip = str(make_video(tmp_path / "c.mp4", duration_s=0.5, fps=4.0, size_wh=(64, 48)).path)
    m = JobManager(cpu_specs(1, ModelConfig(model="m1")),
                   executor=ThreadExecutor(engine_factory=OrderEngine))
    try:
        m.wait_ready(10)

        def submit(query: str, parent: str | None = None) -> str:
            return m.submit(JobSpec(AnalysisRequest(clip, "ground", query), parent=parent))

        jobs = [submit("block")]
        deadline = time.monotonic() + 10
        while m.status(jobs[0]).state is not JobState.RUNNING:  # the worker is busy first
            assert time.monotonic() < deadline, "the first job never started"
            time.sleep(0.01)
        jobs += [submit(f"a{i}", "live-A") for i in range(1, 7)]
        jobs += [submit(f"b{i}", "live-B") for i in range(1, 3)]
        jobs.append(submit("clip"))
        OrderEngine.gate.set()
        for job in jobs:
            assert m.wait(job, timeout=20).state is JobState.DONE
        assert OrderEngine.ran == ["block", "a1", "b1", "clip", "a2", "b2", "a3", "a4", "a5",
                                   "a6"]
    finally:
        OrderEngine.gate.set()
        m.shutdown(5)
