"""Cancel keeps the partial result: a grounding job cancelled midway, on one worker or split
over two, keeps the frames finished before Cancel — in the job's status and in the store, as
a cancelled job's ``chord.result/v1`` with ``partial: true`` — and those frames carry the
same answers an uncancelled run gives them. A cancelled description keeps nothing.

Real engines (the tiny random-weight model) as worker threads running the real worker loop;
the text is meaningless, so frames, times and schemas are checked, never words."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema
import pytest

from chord_core.analysis.engine import Engine
from chord_core.analysis.request import AnalysisRequest, plan
from chord_core.config import ModelConfig, SamplingConfig
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.store import Store
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "result.schema.json").read_text())
CFG = ModelConfig(model="test", batch_size=1)


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("cancel")
    return str(make_video(d / "c.mp4", duration_s=2.5, fps=10.0, size_wh=(96, 72)).path)


def ground(clip: str) -> AnalysisRequest:  # 10 frames: enough to split over two workers
    return AnalysisRequest(clip, "ground", "the square", SamplingConfig(fps=4.0),
                           max_new_tokens=8)


@pytest.fixture(scope="module")
def answers(tiny_model_dir, clip) -> dict[int, str]:
    """Each frame's answer in an uncancelled run."""
    full = Engine(CFG).analyze(ground(clip))
    return dict(zip(full.sampling.frame_indices, full.raw_outputs))


def cancel_after(m: JobManager, job_id: str, frames: int) -> None:
    """Cancel once the job reports ``frames`` grounded frames."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ev = m.status(job_id).last_event
        if ev is not None and ev.stage == "grounding_frames" and ev.done >= frames:
            assert m.cancel(job_id)
            return
        time.sleep(0.005)
    raise AssertionError(f"{job_id} never reached {frames} frames: {m.status(job_id)}")


def settled(m: JobManager, job_id: str):
    deadline = time.monotonic() + 60
    while m.status(job_id).settling and time.monotonic() < deadline:
        time.sleep(0.02)
    return m.status(job_id)


@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "split-over-two"])
def test_cancelled_grounding_keeps_the_frames_done(answers, clip, tmp_path, workers):
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(workers, CFG, threads=1), store=store,
                   executor=ThreadExecutor())
    try:
        m.wait_ready(180)
        req = ground(clip)
        planned = plan(clip, "ground", req.sampling)[1].frame_indices
        job_id = m.submit(JobSpec(req))
        cancel_after(m, job_id, 2)
        assert m.status(job_id).state is JobState.CANCELLED  # at once, as before
        st = settled(m, job_id)
    finally:
        m.shutdown(10)
    assert st.state is JobState.CANCELLED and not st.settling and st.error is None
    r = st.result
    assert r is not None and r.partial, st
    kept = r.sampling.frame_indices
    assert 2 <= len(kept) < len(planned), (kept, planned)
    assert set(kept) <= set(planned) and list(kept) == sorted(kept)
    assert len(r.raw_outputs) == len(kept) == len(r.sampling.timestamps_s)
    assert all(d.frame_index in kept for d in r.detections)
    assert r.warnings[0] == (f"partial result: the job was cancelled after {len(kept)} of "
                             f"{len(planned)} planned frames were grounded; only those are in it")
    # each worker's share keeps a run of frames from its start: one run from the first
    # planned frame, or (split) a second one that starts where the other share begins
    pos = [planned.index(i) for i in kept]
    runs = [p for a, p in zip([-2] + pos, pos) if p != a + 1]
    assert runs[0] == 0 and len(runs) <= workers, (pos, planned)
    if workers == 1:  # the frames kept have the answers a full run gives them (two worker
        # threads loading at once initialise the tiny model's untied head differently)
        assert list(r.raw_outputs) == [answers[i] for i in kept]
    else:
        assert st.worker and "+" in st.worker, st.worker
    # the store: still cancelled, with the partial result (what History shows)
    with store:
        assert store.get_job(job_id)["state"] == "cancelled"
        doc = store.get_result(job_id)
        assert store.find_done(JobSpec(req).key or "") is None
    assert doc is not None and doc["partial"] is True
    assert doc["sampling"]["frame_indices"] == list(kept)
    jsonschema.validate(doc, SCHEMA)


def test_cancelled_description_keeps_nothing(tiny_model_dir, clip, tmp_path):
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(1, CFG, threads=1), store=store, executor=ThreadExecutor())
    try:
        m.wait_ready(180)
        job_id = m.submit(JobSpec(AnalysisRequest(clip, "describe", max_new_tokens=2048)))
        deadline = time.monotonic() + 60
        while m.status(job_id).state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert m.cancel(job_id)
        st = m.status(job_id)
        assert st.state is JobState.CANCELLED and not st.settling and st.result is None
        time.sleep(0.5)  # the worker's answer to the cancel changes nothing
        assert m.status(job_id).result is None
    finally:
        m.shutdown(10)
    with store:
        assert store.get_job(job_id)["state"] == "cancelled"
        assert store.get_result(job_id) is None
