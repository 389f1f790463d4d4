"""Finished jobs leave the manager's memory past its bound once the store holds them, and
still answer ``status`` (result included) from the store; without a store nothing leaves."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.runtime.cluster import in_process_manager
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.store import Store


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("keep")
    rng = np.random.default_rng(5)
    out = []
    for i in range(6):
        p = d / f"k{i}.png"
        Image.fromarray(rng.integers(0, 256, (56, 84, 3), dtype=np.uint8)).save(p)
        out.append(str(p))
    return out


def _run(manager, images: list[str], keys: bool = False) -> list:
    manager.wait_ready(300)
    ids = [manager.submit(JobSpec(AnalysisRequest(p, "entail", f"thing {i}"),
                                  key=f"k{i}" if keys else ""))
           for i, p in enumerate(images)]
    first = [manager.wait(j, 300) for j in ids]
    return ids, first


def test_finished_jobs_leave_memory_and_come_back_from_the_store(images, tmp_path,
                                                                  tiny_model_dir) -> None:
    store = Store(tmp_path / "jobs.sqlite3")
    manager = in_process_manager(ModelConfig(model="test", device="cpu", batch_size=2),
                                 store=store)
    manager.keep_finished = 2
    try:
        ids, first = _run(manager, images, keys=True)
        manager.submit(JobSpec(AnalysisRequest(images[0], "entail", "one more")))  # a round
        manager.wait(manager.jobs()[-1].job_id, 300)
        held = {st.job_id for st in manager.jobs()}
        assert len(held) <= 3 and ids[0] not in held  # the oldest went first
        for job_id, before in zip(ids, first):
            again = manager.status(job_id)
            assert again.state is JobState.DONE and again.spec.request == before.spec.request
            assert again.result.entailment == before.result.entailment
        # the same clip and settings is still the same (stored) job
        assert manager.submit(JobSpec(AnalysisRequest(images[0], "entail", "thing 0"),
                                      key="k0")) == ids[0]
        with pytest.raises(KeyError):
            manager.status("job-never-was")
    finally:
        manager.shutdown()
        store.close()


def test_without_a_store_every_job_stays(images, tiny_model_dir) -> None:
    manager = in_process_manager(ModelConfig(model="test", device="cpu", batch_size=2))
    manager.keep_finished = 2
    try:
        ids, _ = _run(manager, images[:4])
        manager.submit(JobSpec(AnalysisRequest(images[0], "entail", "one more")))
        manager.wait(manager.jobs()[-1].job_id, 300)
        assert {st.job_id for st in manager.jobs()} >= set(ids)
    finally:
        manager.shutdown()
