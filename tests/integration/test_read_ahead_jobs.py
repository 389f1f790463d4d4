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
