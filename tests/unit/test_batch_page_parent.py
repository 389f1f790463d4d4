"""A Batch-page run is one parent job (``chord_ui.batch_parent``), as the CLI's batch is:
one row written through ``manager.parents`` under the manager's lease, the clips' jobs its
children, ended by their handles (done / failed / cancelled); the same clips and settings
again are the same parent and their finished clips are skipped. History labels it "Batch".

Real SQLite store, real manager and worker loop (threads); the engine is the fake at the
boundary (it returns a stored-shape Result per clip, raises for 'bad', blocks on 'block')."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from chord_core.config import ModelConfig, SamplingConfig
from chord_core.errors import JobCancelled, VideoError
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.manager import JobManager
from chord_core.runtime.store import Store
from chord_core.runtime.store_parents import children
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video
from chord_core.types import ProgressEvent
from chord_ui import batch_jobs
from chord_ui.batch_jobs import PendingClip
from tests.unit.fake_engine import LoadedEngine

GATE = threading.Event()


class ClipEngine(LoadedEngine):
    """'bad' raises VideoError, 'block' waits on GATE (honouring cancel), others finish."""

    def analyze(self, request, *, on_progress=None, cancel=None, **_planned):
        on_progress(ProgressEvent("probe", "probing", 0, 0, 0.0))
        while Path(request.video_path).stem == "block" and not GATE.wait(0.01):
            if cancel.is_set():
                raise JobCancelled("cancelled")
        out = self._one(request)
        if isinstance(out, VideoError):
            raise out
        return out

    def describe_many(self, requests, **_planned):
        """Describes come batched (one generate for several clips): a result or an error
        each; 'block' holds the whole call until the test ends (its jobs are cancelled)."""
        if any(Path(r.video_path).stem == "block" for r in requests):
            GATE.wait(30)
        return [self._one(r) for r in requests]

    @staticmethod
    def _one(request):
        from tests.unit.test_store import make_result

        if Path(request.video_path).stem == "bad":
            return VideoError("bad is not a video", hint="upload an mp4")
        result = make_result()
        return replace(result, video=replace(result.video, path=request.video_path))


@pytest.fixture(scope="module")
def clips() -> dict[str, PendingClip]:
    """Clips inside the session's media root (the manager plans only files under it)."""
    import uuid

    from chord_core.media.roots import readable_roots

    folder = Path(readable_roots()[0]) / f"batch-page-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    return {name: PendingClip(f"{name}.mp4", str(make_video(
        folder / f"{name}.mp4", duration_s=0.5, fps=4.0, size_wh=(64, 48), seed=i).path),
        "folder") for i, name in enumerate(("ok", "ok2", "bad", "block"))}


@pytest.fixture
def app(tmp_path: Path):
    GATE.clear()
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(1, ModelConfig(model="test"), threads=1), store=store,
                   executor=ThreadExecutor(engine_factory=ClipEngine))
    m.wait_ready(10)
    yield m, store
    GATE.set()
    m.shutdown(5)
    store.close()


def submit(app, clips: list[PendingClip]) -> batch_jobs.BatchRun:
    manager, store = app
    return batch_jobs.submit_batch(clips, "describe", "", SamplingConfig(), 64, "test",
                                   manager)


def ended(store: Store, run: batch_jobs.BatchRun, timeout: float = 20.0) -> dict:
    """The parent's row once it ended (its children's handles end it, not the page)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = store.get_job(run.batch_id)
        if row["state"] in ("done", "failed", "cancelled"):
            return row
        time.sleep(0.05)
    raise AssertionError(f"{run.batch_id} still {row['state']}")


def test_a_batch_is_one_parent_row_owned_by_the_manager(app, clips) -> None:
    manager, store = app
    run = submit(app, [clips["ok"], clips["ok2"], clips["bad"]])
    row = ended(store, run)
    assert run.batch_id.startswith("batch-") and row["spec"]["long_run"] == "batch"
    assert row["owner"] == manager._link.lease.owner_id  # noqa: SLF001 - the lease's id
    assert row["state"] == "failed" and row["error"]["message"].startswith(
        "1 of 3 clip(s) failed; the first, bad.mp4: bad is not a video")
    assert row["summary"]["progress"] == {"stage": "clips", "done": 3, "total": 3}
    kids = children(store, run.batch_id)
    assert sorted(k["job_id"] for k in kids) == sorted(c.job_id for c in run.clips)
    assert {k["parent"] for k in kids} == {run.batch_id}
    top = [r["job_id"] for r in store.list_jobs(limit=20, top_level=True)]
    assert top == [run.batch_id]  # History: one row, its clips inside


def test_the_same_clips_again_are_the_same_parent_and_skip_finished_ones(app, clips) -> None:
    manager, store = app
    first = submit(app, [clips["ok"], clips["bad"]])
    ended(store, first)
    again = submit(app, [clips["bad"], clips["ok"]])  # another order: the same batch
    assert again.batch_id == first.batch_id
    ok = next(c for c in again.clips if c.name == "ok.mp4")
    assert ok.skipped == "done before" and ok.job_id == next(
        c.job_id for c in first.clips if c.name == "ok.mp4")
    row = ended(store, again)
    assert row["state"] == "failed" and row["summary"]["counts"] == {"skipped": 1, "failed": 1}
    assert len(children(store, first.batch_id)) == 3  # ok once; bad tried by each run
    other = submit(app, [clips["ok"]])  # other clips: another parent
    assert other.batch_id != first.batch_id and ended(store, other)["state"] == "done"


def test_cancel_all_ends_the_parent_cancelled(app, clips) -> None:
    manager, store = app
    run = submit(app, [clips["ok"], clips["block"]])
    assert store.get_job(run.batch_id)["state"] == "running"
    assert batch_jobs.cancel_all(run, manager) >= 1
    row = ended(store, run)
    assert row["state"] == "cancelled" and row["error"] is None


@pytest.mark.parametrize("kind,label,zh", [
    ("batch", "Batch", "批量"), ("batch_predict", "Batch (API)", "批量（API）"),
    ("chapters", "chapters (long video)", None)], ids=["batch", "batch_predict", "chapters"])
def test_history_labels_a_batch_in_words(kind: str, label: str, zh: str | None,
                                         monkeypatch) -> None:
    from chord_ui import history_parents, i18n

    row = {"task": kind, "spec": {"long_run": kind}}
    monkeypatch.setattr(i18n, "lang", lambda: "en")
    assert history_parents.task_label(row) == label
    monkeypatch.setattr(i18n, "lang", lambda: "zh")
    assert history_parents.task_label(row) == (zh or i18n.ZH[label])
