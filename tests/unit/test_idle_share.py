"""Idle workers share a burst of batchable tasks (``scheduling.batch_mates``' ``share``):
one request's 32 entailment pairs run as one call on each idle worker, not as one call on
the first worker while the others wait, so a client that sends one request after another
(the OFA-VE seed's loop) gets each answer from every GPU at once. A call never takes fewer
than ``MIN_SHARE`` pairs, and a lone idle worker batches as before.

The real manager and worker loop (threads), the engine replaced at its boundary by a fake
that records each call it made and on which worker."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PIL import Image

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.scheduling import MIN_SHARE
from chord_core.runtime.workers import cpu_specs
from chord_core.types import ModelInfo, Result, Timing
from tests.unit.fake_engine import LoadedEngine


class CallsEngine(LoadedEngine):
    """Records (its own id, pairs) for each ``entail_many`` call; a call whose first
    statement is "block" waits on ``gate`` (to hold one worker busy)."""

    calls: list[tuple[int, int]] = []
    gate = threading.Event()
    lock = threading.Lock()

    def analyze(self, request, *, info=None, sampling_plan=None, **_):  # a call of one task
        return self.entail_many([request], infos=[info], plans=[sampling_plan])[0]

    def describe_many(self, requests, *, infos, plans, **_):
        return self.entail_many(requests, infos=infos, plans=plans)

    def entail_many(self, requests, *, infos, plans, **_):
        if requests[0].query == "block":
            CallsEngine.gate.wait(30)
        with CallsEngine.lock:
            CallsEngine.calls.append((id(self), len(requests)))
        return [Result(task=r.task, query=r.query, video=i, sampling=p,
                       model=ModelInfo(id=self.model_cfg.model, dtype="float32"),
                       timing=Timing()) for r, i, p in zip(requests, infos, plans)]


@pytest.fixture
def images(tmp_path: Path) -> list[str]:
    paths = []
    for i in range(33):
        p = tmp_path / f"img{i}.png"
        Image.new("RGB", (32, 24), (i * 7 % 255, 40, 90)).save(p)
        paths.append(str(p))
    return paths


def _until_running(m: JobManager, job) -> None:
    deadline = time.monotonic() + 10
    while m.status(job).state is JobState.QUEUED:
        assert time.monotonic() < deadline, m.status(job)
        time.sleep(0.01)


def _run(workers: int, images: list[str], pairs: int, *, hold_one: bool = False,
         weights: dict[str, float] | None = None) -> list[tuple[int, int]]:
    CallsEngine.calls, CallsEngine.gate = [], threading.Event()
    m = JobManager(cpu_specs(workers, ModelConfig(model="m1")),
                   executor=ThreadExecutor(engine_factory=CallsEngine))
    try:
        m.wait_ready(10)
        if weights:
            m.balancer.set_adjustment(0.0)  # the configured speeds alone
            m.balancer.set_weights(weights)
        jobs = []
        if hold_one:  # one worker busy: the burst below finds one idle worker
            jobs.append(m.submit(JobSpec(AnalysisRequest(images[-1], "entail", "block"))))
            _until_running(m, jobs[0])
        with m.holding():  # the request's tasks arrive together, as /batch_predict's do
            jobs += [m.submit(JobSpec(AnalysisRequest(images[i], "entail", f"statement {i}")))
                     for i in range(pairs)]
        if hold_one:  # the burst was handed out while the first worker was still busy
            _until_running(m, jobs[-1])
        CallsEngine.gate.set()
        for job in jobs:
            assert m.wait(job, timeout=20).state is JobState.DONE
        return [c for c in CallsEngine.calls if c[1]]
    finally:
        CallsEngine.gate.set()
        m.shutdown(5)


def test_two_idle_workers_each_take_half_of_a_requests_pairs(images) -> None:
    calls = _run(2, images, 32)
    assert sorted(n for _, n in calls) == [16, 16]
    assert len({engine for engine, _ in calls}) == 2  # one call on each worker


def test_four_idle_workers_each_take_a_quarter_and_never_fewer_than_the_minimum(images) -> None:
    calls = _run(4, images, 32)
    assert sorted(n for _, n in calls) == [8, 8, 8, 8] and MIN_SHARE["entail"] == 8
    small = _run(4, images, 12)  # 3 a worker would be under the minimum: 8 and 4
    assert sorted(n for _, n in small) == [4, 8]


def test_one_idle_worker_takes_the_whole_request_in_one_call(images) -> None:
    assert [n for _, n in _run(1, images, 32)] == [32]
    # two workers, one of them busy: the idle one batches everything, as before
    calls = _run(2, images, 32, hold_one=True)
    assert sorted(n for _, n in calls) == [1, 32]


def test_idle_workers_share_by_their_speed(images) -> None:
    """A worker three times as fast (``gpu_weights``) takes three quarters of the request."""
    calls = _run(2, images, 32, weights={"cpu0": 3.0, "cpu1": 1.0})
    assert sorted(n for _, n in calls) == [8, 24]


def test_a_describe_burst_goes_out_a_worker_batch_to_each_idle_worker(tmp_path) -> None:
    """Describe calls are a worker batch (8 clips by default): 16 clips on two idle workers
    are 8 + 8, not 4 + 4 and then 8."""
    from chord_core.testing.videos import make_video

    clip = str(make_video(tmp_path / "c.mp4", duration_s=0.5, fps=4.0, size_wh=(64, 48)).path)
    CallsEngine.calls = []
    m = JobManager(cpu_specs(2, ModelConfig(model="m1")),
                   executor=ThreadExecutor(engine_factory=CallsEngine))
    try:
        m.wait_ready(10)
        with m.holding():
            jobs = [m.submit(JobSpec(AnalysisRequest(clip, "describe", f"clip {i}")))
                    for i in range(16)]
        for job in jobs:
            assert m.wait(job, timeout=20).state is JobState.DONE
    finally:
        m.shutdown(5)
    assert sorted(n for _, n in CallsEngine.calls) == [8, 8]
    assert len({engine for engine, _ in CallsEngine.calls}) == 2
