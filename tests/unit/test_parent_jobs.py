"""Parent jobs in the real SQLite store (``runtime.store_parents``, ``runtime.parents``): the
``parent`` column (added to an old store on open), a chunk's fixed id queued again unless
done, History's top-level rows, and a chunk spec that keeps its frames through the store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.runtime.jobs import JobSpec
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store
from chord_core.runtime.store_link import StoreLink
from chord_core.types import SamplingPlan, VideoInfo
from tests.unit.test_store import make_result

OLD_JOBS = """CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY, batch_id TEXT, key TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL, video_path TEXT NOT NULL DEFAULT '', video_name TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '', query TEXT NOT NULL DEFAULT '', model TEXT NOT NULL DEFAULT '',
    spec_json TEXT NOT NULL DEFAULT '{}', submitted_at REAL NOT NULL, started_at REAL,
    finished_at REAL, worker TEXT, attempts INTEGER NOT NULL DEFAULT 0, error_json TEXT,
    progress_json TEXT)"""


def chunk_spec(parent: str | None = "lvc-0123456789ab") -> JobSpec:
    info = VideoInfo(path="/clips/long.mp4", duration_s=3600.0, fps=25.0, frame_count=90000,
                     width=640, height=360, timeline=((0, 0.0, 0.04),))
    plan = SamplingPlan(task="describe", fps=0.5, frame_indices=(1500, 1525, 1550),
                        timestamps_s=(60.0, 61.0, 62.0), input_wh=(448, 252), visual_tokens=432)
    req = AnalysisRequest(info.path, "describe", "what happens from 1:00 to 2:00?")
    return JobSpec(req, model="test", label="long.mp4 chunk 2/60", info=info, plan=plan,
                   parent=parent)


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "chord.sqlite3")
    yield s
    s.close()


def test_a_chunk_spec_keeps_its_frames_and_parent_through_the_store(store) -> None:
    spec = chunk_spec()
    store.add_job("lvc-0123456789ab-c0001", video_path=spec.request.video_path,
                  task="describe", spec=spec.to_dict(), parent=spec.parent)
    back = JobSpec.from_dict(store.get_job("lvc-0123456789ab-c0001")["spec"])
    assert back == spec  # info (with its timeline), plan and parent: what resume needs
    assert store.get_job("lvc-0123456789ab-c0001")["parent"] == "lvc-0123456789ab"
    plain = JobSpec(spec.request, model="test")
    assert "plan" not in plain.to_dict() and JobSpec.from_dict(plain.to_dict()) == plain


def test_an_old_store_gets_the_parent_column(tmp_path) -> None:
    path = tmp_path / "chord.sqlite3"
    Store(path).close()
    conn = sqlite3.connect(path)  # a store as Chord wrote it before parent jobs
    conn.executescript("DROP INDEX IF EXISTS jobs_parent; DROP TABLE results; DROP TABLE jobs;"
                       + OLD_JOBS + "; INSERT INTO jobs (job_id, state, submitted_at) "
                       "VALUES ('job-old', 'done', 1.0);")
    conn.close()
    with Store(path) as s:
        row = s.get_job("job-old")
        assert row["parent"] is None and row["summary"] is None
        assert [r["job_id"] for r in s.list_jobs(top_level=True)] == ["job-old"]


@pytest.mark.parametrize("state, queued_again", [
    ("queued", True), ("running", True), ("failed", True), ("cancelled", True), ("done", False),
], ids=["queued", "running", "failed", "cancelled", "done"])
def test_a_chunks_fixed_id_is_queued_again_unless_done(store, state, queued_again) -> None:
    spec, job = chunk_spec(), "lvc-0123456789ab-c0001"
    store.add_job(job, video_path="/clips/long.mp4", task="describe", spec={},
                  parent=spec.parent)
    if state == "done":
        store.save_result(job, make_result())
    elif state != "queued":
        store.update_state(job, "running")
        if state != "running":
            store.update_state(job, state, error={"message": "x", "hint": ""})
    store.add_job(job, video_path="/clips/long.mp4", task="describe", spec=spec.to_dict(),
                  parent=spec.parent)
    row = store.get_job(job)
    assert row["state"] == ("queued" if queued_again else "done")
    assert (row["spec"] == spec.to_dict()) is queued_again and store.count_jobs() == 1
    with pytest.raises(ValueError, match="already exists"):  # a job of its own: still refused
        store.add_job("job-1", video_path="a.mp4", task="describe")
        store.add_job("job-1", video_path="a.mp4", task="describe")


def test_a_parent_row_carries_its_summary_and_ends_with_it(store) -> None:
    parents = ParentJobs(store)
    row = parents.open("lvc-1", kind="chapters", video_path="/clips/long.mp4", model="test",
                       label="long.mp4", spec={"task": "describe", "video_key": "k"})
    assert row["state"] == "running" and row["task"] == "chapters" and row["summary"] is None
    assert row["spec"]["long_run"] == "chapters" and row["spec"]["task"] == "describe"
    store.add_job("lvc-1-c0000", video_path="/clips/long.mp4", task="describe",
                  parent="lvc-1")
    parents.summarise("lvc-1", {"progress": {"stage": "chunks", "done": 1, "total": 60}})
    # taken up again after a crash: running again, its summary (plan, progress) kept
    again = parents.open("lvc-1", kind="chapters", video_path="/clips/long.mp4",
                         model="test", label="long.mp4")
    assert again["summary"]["progress"]["done"] == 1 and again["attempts"] == 2
    parents.finish("lvc-1", "done", {"document": {"schema": "chord.chapters/v1"}})
    done = store.get_job("lvc-1")
    assert done["state"] == "done" and done["finished_at"] is not None
    assert done["summary"]["document"]["schema"] == "chord.chapters/v1"
    assert parents.open("lvc-1", kind="chapters", video_path="/clips/long.mp4",
                        model="test", label="long.mp4")["state"] == "done"  # left as is
    assert [r["job_id"] for r in store.list_jobs(top_level=True)] == ["lvc-1"]
    assert [r["job_id"] for r in parents.children("lvc-1")] == ["lvc-1-c0000"]


def test_a_parent_under_a_parent_the_store_lacks_is_top_level(store) -> None:
    ParentJobs(store).open("lvs-1", kind="search", video_path="a.mp4", model="test",
                           label="a.mp4", parent="lvc-not-here")
    assert store.get_job("lvs-1")["parent"] is None


def test_resume_leaves_parent_rows_to_their_run_and_resumes_chunks(store) -> None:
    ParentJobs(store).open("lvc-0123456789ab", kind="chapters", video_path="/clips/long.mp4",
                           model="test", label="long.mp4")
    spec = chunk_spec()
    store.add_job("lvc-0123456789ab-c0001", video_path="/clips/long.mp4", task="describe",
                  spec=spec.to_dict(), parent=spec.parent)
    store.update_state("lvc-0123456789ab-c0001", "running")
    resumed = dict(StoreLink(store).resumable({}))
    assert list(resumed) == ["lvc-0123456789ab-c0001"]
    assert resumed["lvc-0123456789ab-c0001"].plan == spec.plan  # its chunk, not the clip
    assert store.get_job("lvc-0123456789ab")["state"] == "queued"  # waits for its run


def test_without_a_store_nothing_is_kept() -> None:
    parents = ParentJobs(None)
    assert parents.open("lvc-1", kind="chapters", video_path="a.mp4", model="test",
                        label="a") == {}
    parents.summarise("lvc-1", {"progress": {}})
    assert parents.stored_result("lvc-1-c0000") is None and parents.children("lvc-1") == []
