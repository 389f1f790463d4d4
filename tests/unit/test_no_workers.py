"""Jobs submitted after every worker failed fail at once with the reason, instead of staying
queued for a worker that never comes (the workers die as they start: the engine is the fake
at the boundary; the manager, its restarts and the SQLite store are real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.store import Store
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video


def dies_loading(cfg: ModelConfig) -> None:
    """A worker whose process ends while it loads its model (a thread: SystemExit)."""
    raise SystemExit("killed while loading")


# the worker threads end on SystemExit, as a killed worker process ends: expected here
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("workers", [1, 2], ids=["one-worker", "two-workers"])
def test_jobs_submitted_after_every_worker_failed_fail_with_the_reason(tmp_path: Path,
                                                                       workers: int) -> None:
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(workers, ModelConfig(model="test"), threads=1), store=store,
                   executor=ThreadExecutor(engine_factory=dies_loading))
    try:
        m.wait_ready(60)  # set once every worker was given up (3 deaths at start, ~1.5 s)
        assert {w["state"] for w in m.workers()} == {"failed"}
        clip = make_video(tmp_path / "a.mp4", duration_s=1.0, fps=4.0, size_wh=(32, 24))
        spec = JobSpec(AnalysisRequest(str(clip.path), "describe"))
        st = m.handle(m.submit(spec)).result(timeout=10)  # not queued forever
        assert st.state is JobState.FAILED, st
        assert st.error["type"] == "WorkerCrashed"
        assert f"no worker is left to run this job: all {workers} worker(s) failed" \
            in st.error["message"]
        assert "could not start" in st.error["message"]  # what failed
        assert "start the app or the service again" in st.error["hint"]  # what to do
        row = store.get_job(st.job_id)
        assert row["state"] == "failed" and row["error"]["type"] == "WorkerCrashed"
    finally:
        m.shutdown()
        store.close()
