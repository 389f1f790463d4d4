"""A worker reads the frames of the task queued behind the one it runs (``RunTasks.ahead``,
``media/read_ahead.py``): through the real job manager and worker loop, the later jobs take
frames read ahead, and their results are those of a plain run — same frames, same times,
same answers. Tiny random-weight model on CPU: frames and times are checked, never words."""

from __future__ import annotations

import time

import pytest

from chord_core.analysis.engine import Engine
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig, SamplingConfig
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
CFG = ModelConfig(model="test", batch_size=1)


def ground(clip: str) -> AnalysisRequest:
    return AnalysisRequest(clip, "ground", "the square", SamplingConfig(fps=4.0),
                           max_new_tokens=8)


@pytest.mark.parametrize("switch", ["", "0"], ids=["default", "CHORD_READ_AHEAD=0"])
def test_queued_jobs_take_frames_read_ahead(tiny_model_dir, tmp_path, monkeypatch, switch):
    monkeypatch.setenv("CHORD_READ_AHEAD", switch)
    clips = [str(make_video(tmp_path / f"c{i}.mp4", duration_s=2.0, fps=10.0,
                            size_wh=(96, 72), seed=i).path) for i in range(4)]
    m = JobManager(cpu_specs(1, CFG, threads=1), store=None, executor=ThreadExecutor())
    try:
        m.wait_ready(180)
        ids = [m.submit(JobSpec(ground(c))) for c in clips]
        deadline = time.monotonic() + 240
        while not all(m.status(j).state.finished for j in ids):
            assert time.monotonic() < deadline, [m.status(j).state for j in ids]
            time.sleep(0.05)
        done = [m.status(j) for j in ids]
    finally:
        m.shutdown(10)
    assert all(st.state is JobState.DONE for st in done), [st.error for st in done]
    ahead = [any("read ahead" in ev.message for ev in st.events) for st in done]
    # the first job starts on an empty queue; each one after it was queued behind another
    if switch == "0":
        assert not any(ahead), ahead
    else:
        assert not ahead[0] and all(ahead[2:]), ahead
    plain = Engine(CFG)
    for clip, st in zip(clips, done):
        want = plain.analyze(ground(clip))
        got = st.result
        assert got.sampling.frame_indices == want.sampling.frame_indices
        assert got.sampling.timestamps_s == want.sampling.timestamps_s
        assert got.raw_outputs == want.raw_outputs
        assert got.video.path == clip


def test_jobs_queued_while_a_call_runs_are_read_during_it(tiny_model_dir, tmp_path,
                                                           monkeypatch):
    """A service's next requests arrive while the worker is in a call: the manager tells it
    mid-call (``Expect`` on the control channel), so their frames are read during that call,
    not when theirs begins."""
    monkeypatch.setenv("CHORD_READ_AHEAD", "")
    clips = [str(make_video(tmp_path / f"m{i}.mp4", duration_s=4.0 if i == 0 else 2.0,
                            fps=10.0, size_wh=(96, 72), seed=i).path) for i in range(2)]
    m = JobManager(cpu_specs(1, CFG, threads=1), store=None, executor=ThreadExecutor())
    try:
        m.wait_ready(180)
        first = m.submit(JobSpec(ground(clips[0])))
        deadline = time.monotonic() + 120
        while m.status(first).state is JobState.QUEUED:  # handed out, with nothing behind
            assert time.monotonic() < deadline
            time.sleep(0.01)
        later = m.submit(JobSpec(ground(clips[1])))
        for j in (first, later):
            st = m.wait(j, 240)
            assert st.state is JobState.DONE, st.error
    finally:
        m.shutdown(10)
    assert any("read ahead" in ev.message for ev in m.status(later).events)
    assert not any("read ahead" in ev.message for ev in m.status(first).events)


def test_a_hint_for_another_call_is_ignored() -> None:
    from chord_core.runtime.workers import _expect

    class Recorder:  # the engine's read-ahead door, recorded
        def __init__(self) -> None:
            self.calls: list = []

        def expect(self, upcoming, now=()):
            self.calls.append((list(upcoming), list(now)))

    class T:
        def __init__(self, model: str | None) -> None:
            self.info, self.plan, self.model = f"info-{model}", "plan", model

    engine = Recorder()
    current = {"engine": engine, "model": None, "now": ["in hand"], "call": "job-1/t0",
               "read_ahead": True}
    _expect(current, "job-0/t0", [T(None)])  # worked out for a call that has ended
    assert engine.calls == []
    _expect(current, "job-1/t0", [T(None), T("other-model")])
    assert engine.calls == [([("info-None", "plan")], ["in hand"])]
    _expect({**current, "read_ahead": False}, "job-1/t0", [T(None)])  # CHORD_READ_AHEAD=0
    assert len(engine.calls) == 1
