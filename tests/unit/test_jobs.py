"""The in-process job runner: states, progress, cancel, isolation of failures.

The engine is replaced at its boundary by a scripted fake so these tests check the runner's
own logic; the real engine runs through the runner in tests/integration/test_engine.py."""

from __future__ import annotations

import threading

import pytest

from chord_core.config import ModelConfig
from chord_core.analysis.engine import AnalysisRequest
from chord_core.errors import JobCancelled, VideoError
from chord_core.runtime.jobs import JobRunner, JobSpec, JobState
from chord_core.types import ModelInfo, ProgressEvent


class ScriptedEngine:
    """Behaves per video path: 'ok' returns a marker, 'bad' raises VideoError, 'bug' raises
    a plain exception, 'block' waits on a gate (and honours cancel)."""

    loads: list[str] = []
    gate = threading.Event()

    def __init__(self, cfg: ModelConfig) -> None:
        self.model_cfg = cfg
        self.model_info = ModelInfo(id=cfg.model, dtype="float32")

    def load(self) -> None:
        ScriptedEngine.loads.append(self.model_cfg.model)

    def unload(self) -> None:
        pass

    def analyze(self, request, *, on_progress=None, cancel=None):
        on_progress(ProgressEvent("probe", "probing", 0, 0, 0.0))
        if request.video_path == "bad":
            raise VideoError("bad is not a video", hint="upload an mp4")
        if request.video_path == "bug":
            raise ZeroDivisionError("boom")
        if request.video_path == "block":
            while not ScriptedEngine.gate.wait(0.01):
                if cancel.is_set():
                    raise JobCancelled("cancelled")
        on_progress(ProgressEvent("done", "finished", 1, 1, 0.1))
        return f"result:{request.video_path}:{self.model_cfg.model}"


@pytest.fixture
def runner():
    ScriptedEngine.loads = []
    ScriptedEngine.gate = threading.Event()
    r = JobRunner(ModelConfig(model="m1"), engine_factory=ScriptedEngine)
    yield r
    ScriptedEngine.gate.set()
    r.shutdown()


def spec(path: str, model: str | None = None) -> JobSpec:
    return JobSpec(AnalysisRequest(path, "describe"), model=model)


@pytest.mark.parametrize(
    ("path", "state", "error_type"),
    [("ok", JobState.DONE, None), ("bad", JobState.FAILED, "VideoError"),
     ("bug", JobState.FAILED, "ZeroDivisionError")],
    ids=["success", "user-error", "internal-bug"])
def test_job_outcomes(runner, path, state, error_type):
    st = runner.wait(runner.submit(spec(path)), timeout=10)
    assert st.state is state
    assert st.events[0].stage == "probe"
    if error_type is None:
        assert st.result == "result:ok:m1" and st.error is None
    else:
        assert st.error["type"] == error_type and st.result is None
        assert st.error["hint"]


def test_failure_does_not_stop_worker_or_touch_other_results(runner):
    first = runner.submit(spec("ok"))
    bad = runner.submit(spec("bug"))
    after = runner.submit(spec("ok"))
    assert runner.wait(after, timeout=10).state is JobState.DONE
    assert runner.status(first).result == "result:ok:m1"
    assert runner.status(bad).state is JobState.FAILED


def test_model_loaded_once_and_switched_on_request(runner):
    for _ in range(3):
        runner.wait(runner.submit(spec("ok")), timeout=10)
    assert ScriptedEngine.loads == ["m1"]
    st = runner.wait(runner.submit(spec("ok", model="m2")), timeout=10)
    assert st.result == "result:ok:m2"
    assert ScriptedEngine.loads == ["m1", "m2"]
    assert runner.model_state()["state"] == "ready" and runner.model_state()["model"] == "m2"


def test_cancel_running_and_queued(runner):
    running = runner.submit(spec("block"))
    queued = runner.submit(spec("ok"))
    assert runner.cancel(queued) is True
    assert runner.status(queued).state is JobState.CANCELLED
    assert runner.cancel(running) is True
    assert runner.wait(running, timeout=10).state is JobState.CANCELLED
    assert runner.cancel(running) is False  # already finished
    nxt = runner.submit(spec("ok"))
    assert runner.wait(nxt, timeout=10).state is JobState.DONE


def test_unknown_job_raises_keyerror(runner):
    with pytest.raises(KeyError):
        runner.status("job-nope")
