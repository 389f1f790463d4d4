"""The job manager's own logic — states, progress, cancel, one model per worker, isolation of
failures — through the in-process executor (workers as threads running the real worker loop).

The engine is replaced at its boundary by a scripted fake so these tests check the manager
and the worker loop; real engines run through real worker processes in
tests/integration/test_manager.py. Clips are real (tiny synthetic files): the manager probes
and plans every job itself."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.errors import JobCancelled, VideoError
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video
from chord_core.types import ModelInfo, ProgressEvent


class ScriptedEngine:
    """Behaves per clip name: 'ok' returns a marker, 'bad' raises VideoError, 'bug' raises a
    plain exception, 'block' waits on a gate (and honours cancel)."""

    loads: list[str] = []
    gate = threading.Event()

    def __init__(self, cfg: ModelConfig) -> None:
        self.model_cfg = cfg
        self.model_info = ModelInfo(id=cfg.model, dtype="float32")

    def load(self) -> SimpleNamespace:
        ScriptedEngine.loads.append(self.model_cfg.model)
        return SimpleNamespace(load_s=0.0, phases={})

    def unload(self) -> None:
        pass

    def analyze(self, request, *, on_progress=None, cancel=None, **_planned):
        on_progress(ProgressEvent("probe", "probing", 0, 0, 0.0))
        name = Path(request.video_path).stem
        if name == "bad":
            raise VideoError("bad is not a video", hint="upload an mp4")
        if name == "bug":
            raise ZeroDivisionError("boom")
        if name == "block":
            while not ScriptedEngine.gate.wait(0.01):
                if cancel.is_set():
                    raise JobCancelled("cancelled")
        on_progress(ProgressEvent("done", "finished", 1, 1, 0.1))
        return f"result:{name}:{self.model_cfg.model}"


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("clips")
    return {name: str(make_video(folder / f"{name}.mp4", duration_s=0.5, fps=4.0,
                                 size_wh=(64, 48)).path)
            for name in ("ok", "bad", "bug", "block")}


@pytest.fixture
def manager():
    ScriptedEngine.loads = []
    ScriptedEngine.gate = threading.Event()
    m = JobManager(cpu_specs(1, ModelConfig(model="m1")),
                   executor=ThreadExecutor(engine_factory=ScriptedEngine))
    m.wait_ready(10)
    yield m
    ScriptedEngine.gate.set()
    m.shutdown(5)


def spec(path: str, model: str | None = None) -> JobSpec:
    return JobSpec(AnalysisRequest(path, "ground", "the square"), model=model)


@pytest.mark.parametrize(
    ("name", "state", "error_type"),
    [("ok", JobState.DONE, None), ("bad", JobState.FAILED, "VideoError"),
     ("bug", JobState.FAILED, "InternalError")],
    ids=["success", "user-error", "internal-bug"])
def test_job_outcomes(manager, clips, name, state, error_type):
    st = manager.wait(manager.submit(spec(clips[name])), timeout=10)
    assert st.state is state
    assert st.events[0].stage == "probe"
    if error_type is None:
        assert st.result == "result:ok:m1" and st.error is None
    else:
        assert st.error["type"] == error_type and st.result is None
        assert st.error["hint"]
        if name == "bug":  # the bug's own class is named in the message, not as the type
            assert "ZeroDivisionError" in st.error["message"]


def test_failure_does_not_stop_worker_or_touch_other_results(manager, clips):
    first = manager.submit(spec(clips["ok"]))
    bad = manager.submit(spec(clips["bug"]))
    after = manager.submit(spec(clips["ok"], model="m1"))
    assert manager.wait(after, timeout=10).state is JobState.DONE
    assert manager.status(first).result == "result:ok:m1"
    assert manager.status(bad).state is JobState.FAILED
    assert manager.workers()[0]["restarts"] == 0


def test_model_loaded_once_and_switched_on_request(manager, clips):
    for _ in range(3):
        manager.wait(manager.submit(spec(clips["ok"])), timeout=10)
    assert ScriptedEngine.loads == ["m1"]
    st = manager.wait(manager.submit(spec(clips["ok"], model="m2")), timeout=10)
    assert st.result == "result:ok:m2"
    assert ScriptedEngine.loads == ["m1", "m2"]
    assert manager.model_state()["state"] == "ready"


def test_cancel_running_and_queued(manager, clips):
    running = manager.submit(spec(clips["block"]))
    queued = manager.submit(spec(clips["ok"], model="m1"))
    assert manager.cancel(queued) is True
    assert manager.status(queued).state is JobState.CANCELLED
    assert manager.cancel(running) is True
    assert manager.wait(running, timeout=10).state is JobState.CANCELLED
    assert manager.cancel(running) is False  # already finished
    nxt = manager.submit(spec(clips["ok"], model="m1"))
    assert manager.wait(nxt, timeout=10).state is JobState.DONE


def test_unknown_job_raises_keyerror(manager):
    with pytest.raises(KeyError):
        manager.status("job-nope")
