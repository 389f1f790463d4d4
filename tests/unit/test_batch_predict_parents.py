"""A ``/batch_predict`` request as a parent job (``service/ofa.keyed``,
``service/runtime.resume_parents``): the same request is the same parent and the same jobs;
a parent a crash left unfinished is ended by the restarted service once its children have
(real SQLite store, real manager; its engine, never reached, is the fake at the boundary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.jobs import JobSpec
from chord_core.runtime.manager import JobManager
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store
from chord_core.runtime.workers import cpu_specs
from chord_core.service.ofa import keyed
from chord_core.service.runtime import resume_parents


def specs(tmp_path: Path, texts: list[str]) -> list[JobSpec]:
    from PIL import Image

    image = tmp_path / "a.png"
    if not image.exists():
        Image.new("RGB", (32, 24), (200, 10, 10)).save(image)
    return [JobSpec(AnalysisRequest(str(image), "entail", t)) for t in texts]


def test_the_same_request_is_the_same_parent_and_the_same_keys(tmp_path: Path) -> None:
    one, parent = keyed(specs(tmp_path, ["a cat", "a dog"]), [0, 1], "test")
    again, parent2 = keyed(specs(tmp_path, ["a cat", "a dog"]), [0, 1], "test")
    assert parent == parent2 and parent.startswith("bp-")
    assert [s.key for s in one] == [s.key for s in again] and one[0].key != one[1].key
    other = [keyed(specs(tmp_path, ["a cat", "a dog"]), [0, 1], "other-model")[1],
             keyed(specs(tmp_path, ["a cat", "a bird"]), [0, 1], "test")[1],
             keyed(specs(tmp_path, ["a cat", "a dog"]), ["x", 1], "test")[1]]
    assert parent not in other and len(set(other)) == 3


def never_loads(cfg: ModelConfig) -> None:
    raise SystemExit("no model in this test")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_parent_a_crash_left_is_ended_once_its_children_have(tmp_path: Path) -> None:
    with Store(tmp_path / "chord.sqlite3") as store:
        ParentJobs(store, "own-gone").open("bp-1", kind="batch_predict", video_path="",
                                           model="test", label="api batch_predict")
        for i, state in enumerate(("failed", "cancelled")):  # finished before the crash
            store.add_job(f"job-{i}", video_path="/x.png", task="entail", parent="bp-1",
                          spec=specs(tmp_path, ["a cat"])[0].to_dict(), owner="own-gone")
            store.update_state(f"job-{i}", "running", owner="own-gone")
            store.update_state(f"job-{i}", state, error={"type": "InputError",
                                                        "message": "x"}, owner="own-gone")
        m = JobManager(cpu_specs(1, ModelConfig(model="test"), threads=1), store=store,
                       executor=ThreadExecutor(engine_factory=never_loads))
        try:
            assert store.get_job("bp-1")["state"] == "queued"  # claimed from the dead owner
            assert resume_parents(m, store) == 1
            row = store.get_job("bp-1")
            assert row["state"] == "done", row
            assert row["summary"]["counts"] == {"failed": 1, "cancelled": 1}
            assert row["summary"]["progress"] == {"stage": "tasks", "done": 2, "total": 2}
            assert resume_parents(m, store) == 0  # ended: not followed again
        finally:
            m.shutdown()
