"""Process workers with the tiny model on CPU: the same code path GPU workers run.

Two CPU workers process a batch; a job split across workers equals the same job on one
worker; a worker killed mid-batch loses nothing and duplicates nothing; injected CUDA
out-of-memory degrades the batch size and says so in the result."""

from __future__ import annotations

import time

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig, SamplingConfig
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("mclips")
    return [str(make_video(d / f"c{i}.mp4", duration_s=2.0 + i, fps=10.0, size_wh=(160, 120),
                           seed=i).path) for i in range(4)]


@pytest.fixture(scope="module")
def two_workers(tiny_model_dir):
    m = JobManager(cpu_specs(2, ModelConfig(model="test", batch_size=1), threads=1))
    m.wait_ready(180)
    yield m
    m.shutdown()


def describe(path: str) -> JobSpec:
    return JobSpec(AnalysisRequest(path, "describe", max_new_tokens=128))


def test_two_cpu_workers_process_a_batch(two_workers, clips):
    ids = [two_workers.submit(describe(c)) for c in clips]
    bad = two_workers.submit(describe(__file__))
    results = [two_workers.wait(i, 300) for i in ids]
    assert all(r.state is JobState.DONE for r in results)
    assert [r.result.video.path for r in results] == clips
    assert all(r.result.model.test_model for r in results)
    failed = two_workers.wait(bad, 60)
    assert failed.state is JobState.FAILED and failed.error["type"] == "VideoError"
    rows = two_workers.workers()
    assert {r["worker"] for r in rows} == {"cpu0", "cpu1"}
    assert all(r["tasks_done"] >= 1 for r in rows), rows  # both replicas took work


def test_split_grounding_equals_single_worker(two_workers, clips, tiny_model_dir):
    sampling = SamplingConfig(fps=4.0)
    req = AnalysisRequest(clips[3], "ground", "the square", sampling=sampling)
    split = two_workers.wait(two_workers.submit(JobSpec(req)), 300)
    assert split.state is JobState.DONE, split.error
    from chord_core.analysis.engine import Engine

    single = Engine(ModelConfig(model="test", batch_size=1)).analyze(req)
    assert split.result.sampling.frame_indices == single.sampling.frame_indices
    assert split.result.sampling.num_frames >= 8
    assert split.result.raw_outputs == single.raw_outputs  # merged in frame order
    assert split.result.detections == single.detections


@pytest.mark.parametrize("batch", [1, 3], ids=["one-job-at-a-time", "describe-batches"])
def test_killed_worker_loses_nothing(tiny_model_dir, clips, batch):
    """Killed mid-job (batch 1) or mid-batch (batch 3: every job of the batch re-queued)."""
    m = JobManager(cpu_specs(2, ModelConfig(model="test", batch_size=batch), threads=1))
    try:
        m.wait_ready(180)
        ids = [m.submit(describe(c)) for c in clips * 2]
        deadline = time.monotonic() + 60
        while not any(w["job"] for w in m.workers()) and time.monotonic() < deadline:
            time.sleep(0.01)
        victim = next(w["worker"] for w in m.workers() if w["job"])
        m.kill_worker(victim)
        finals = [m.wait(i, 300) for i in ids]
        assert [f.state for f in finals] == [JobState.DONE] * len(ids)
        assert [f.result.video.path for f in finals] == clips * 2
        row = next(w for w in m.workers() if w["worker"] == victim)
        assert row["restarts"] == 1
        assert sum(w["tasks_done"] for w in m.workers()) == len(ids)  # nothing ran twice
    finally:
        m.shutdown()


def test_injected_oom_reduces_batch_and_reports(tiny_model_dir, clips, monkeypatch):
    monkeypatch.setenv("CHORD_FAULT_OOM", "2")
    m = JobManager(cpu_specs(1, ModelConfig(model="test", batch_size=4), threads=1))
    try:
        req = AnalysisRequest(clips[1], "ground", "the square")
        st = m.wait(m.submit(JobSpec(req)), 300)
        assert st.state is JobState.DONE, st.error
        reduced = [w for w in st.result.warnings if "batch size reduced" in w]
        assert reduced == ["out of GPU memory: batch size reduced 4 → 2",
                           "out of GPU memory: batch size reduced 2 → 1"]
        assert len(st.result.raw_outputs) == st.result.sampling.num_frames
    finally:
        m.shutdown()


def test_worker_with_missing_startup_model_still_serves_other_models(tiny_model_dir, clips,
                                                                     tmp_path):
    missing = str(tmp_path / "no-such-model")
    m = JobManager(cpu_specs(1, ModelConfig(model=missing, batch_size=1), threads=1))
    try:
        m.wait_ready(120)
        assert m.model_state()["state"] == "failed"
        assert missing in m.model_state()["error"]["message"]
        bad = m.wait(m.submit(describe(clips[0])), 120)
        assert bad.state is JobState.FAILED and bad.error["type"] == "ModelNotFoundError"
        spec = JobSpec(AnalysisRequest(clips[0], "describe", max_new_tokens=128), model="test")
        good = m.wait(m.submit(spec), 300)
        assert good.state is JobState.DONE and good.result.model.test_model
    finally:
        m.shutdown()


def test_queued_describes_share_one_generate_call(tiny_model_dir, clips):
    m = JobManager(cpu_specs(1, ModelConfig(model="test", batch_size=4), threads=1))
    try:
        m.wait_ready(180)
        m.wait(m.submit(describe(clips[0])), 300)  # the first request's one-time costs
        first = m.submit(describe(clips[0]))  # keeps the worker busy while a burst queues
        ids = [m.submit(describe(c)) for c in clips]
        m.wait(first, 300)
        finals = [m.wait(i, 300) for i in ids]
        assert [f.state for f in finals] == [JobState.DONE] * len(clips)
        batched = [f for f in finals
                   if any("in a batch of" in e.message for e in f.events)]
        assert len(batched) >= 2, [e.message for f in finals for e in f.events]
        from chord_core.analysis.engine import Engine

        engine = Engine(ModelConfig(model="test"))
        for f, clip in zip(finals, clips):  # batching (left padding) changes no answer
            assert f.result.video.path == clip
            assert f.result.text == engine.analyze(describe(clip).request).text
        assert m.workers()[0]["tasks_done"] == len(clips) + 2
        with m._lock:  # a burst arriving at an idle worker, seen by the dispatcher at once
            burst = [m.submit(describe(c)) for c in clips]
        done = [m.wait(i, 300) for i in burst]
        # handed out whole: the first clip is not sent off alone while the rest are probed
        assert all(any(f"in a batch of {len(clips)}" in e.message for e in f.events)
                   for f in done), [e.message for f in done for e in f.events]
    finally:
        m.shutdown()



def test_two_pass_grounding_runs_whole_on_one_worker(two_workers, clips):
    """Two-pass needs the whole clip in one place (the first pass sees every frame): the
    manager never splits it, whereas the same per-frame job is split (above)."""
    req = AnalysisRequest(clips[3], "ground", "the square", sampling=SamplingConfig(fps=4.0),
                          ground_method="two_pass", score_boxes=False)
    job = two_workers.wait(two_workers.submit(JobSpec(req, model="test-qwen3")), 300)
    assert job.state is JobState.DONE, job.error
    assert job.worker in ("cpu0", "cpu1")  # one worker, not "cpu0+cpu1"
    res = job.result
    assert res.model.family == "qwen3-vl" and res.model.coords == "relative1000"
    # the random model cannot answer "when": either spans or the per-frame fallback, said so
    assert res.method == "two_pass" or any("no usable time span" in w for w in res.warnings)
    assert res.sampling.num_frames >= 8 and len(res.raw_outputs) >= 1
