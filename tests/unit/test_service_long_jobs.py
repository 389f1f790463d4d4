"""The service's registry of long-video runs (``service/long_jobs.py``): the event log a
run's stream reads, the same run asked twice, the bound on runs at once, the finished runs
it forgets, and the open rows a restart drives again (a real store; the manager is only its
``parents``, the runtime's own ``ParentJobs``)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from chord_core.errors import ResourceError, VideoError
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store
from chord_core.service import long_jobs
from chord_core.service.long_jobs import LongJob, LongRuns


def test_the_event_log_is_read_from_a_cursor_and_wakes_watchers() -> None:
    job = LongJob("lvc-1", "chapters", "", "clip.mp4")
    woken = threading.Event()
    stop = job.watch(woken.set)
    job.record("child", {"job_id": "lvc-1-c0000", "event": "start"})
    assert woken.is_set()
    events, cursor = job.since(0)
    assert events == [("child", {"job_id": "lvc-1-c0000", "event": "start"})]
    job.record("progress", {"stage": "chunks", "done": 1, "total": 3})
    later, cursor2 = job.since(cursor)
    assert [name for name, _ in later] == ["progress"] and cursor2 == cursor + 1
    assert job.view()["progress"] == {"stage": "chunks", "done": 1, "total": 3}
    stop()
    woken.clear()
    job.set_state("done", document={"schema": "x"})
    assert not woken.is_set()  # stopped watching
    view = job.view()
    assert view["state"] == "done" and view["document"] == {"schema": "x"}
    assert view["finished_at"] is not None


def test_the_log_keeps_the_newest_events_when_it_is_full(monkeypatch) -> None:
    monkeypatch.setattr(long_jobs, "MAX_EVENTS", 5)
    job = LongJob("lvc-2", "chapters", "", "")
    for i in range(8):
        job.record("child", {"i": i})
    events, cursor = job.since(0)
    assert [d["i"] for _, d in events] == [3, 4, 5, 6, 7] and cursor == 8
    assert job.since(7)[0] == [("child", {"i": 7})]  # seq 8 is the eighth, i = 7


def test_the_same_run_asked_again_is_that_run_until_it_failed() -> None:
    runs = LongRuns(None, None, "test")
    first, new = runs.claim(LongJob("lvc-3", "chapters", "", ""))
    assert new
    same, new = runs.claim(LongJob("lvc-3", "chapters", "", ""))
    assert same is first and not new
    first.set_state("done", document={})
    assert runs.claim(LongJob("lvc-3", "chapters", "", ""))[0] is first  # read back
    first.set_state("failed", error={"message": "x"})
    again, new = runs.claim(LongJob("lvc-3", "chapters", "", ""))
    assert new and again is not first  # a failed run starts again (resumes its chunks)


def test_runs_at_once_are_bounded_and_finished_ones_forgotten(monkeypatch) -> None:
    monkeypatch.setattr(long_jobs, "MAX_LIVE", 2)
    monkeypatch.setattr(long_jobs, "MAX_KEPT", 1)
    runs = LongRuns(None, None, "test")
    a = runs.claim(LongJob("a", "chapters", "", ""))[0]
    runs.claim(LongJob("b", "chapters", "", ""))
    with pytest.raises(ResourceError, match="at most 2 at once"):
        runs.claim(LongJob("c", "chapters", "", ""))
    a.set_state("done", document={})
    runs.claim(LongJob("c", "chapters", "", ""))  # a finished: room again
    assert runs.live() == 2 and runs.get("a") is a  # one finished run is kept
    runs.get("b").set_state("cancelled")  # type: ignore[union-attr]
    runs.claim(LongJob("d", "chapters", "", ""))
    assert runs.get("a") is None and runs.get("b") is not None  # the oldest went


def test_open_rows_of_this_service_are_driven_again_and_a_lost_clip_fails(tmp_path) -> None:
    with Store(tmp_path / "chord.sqlite3") as store:
        parents = ParentJobs(store)
        origin = {"service": {"task": "chapters", "video_path": str(tmp_path / "gone.mp4")}}
        parents.open("lvc-open", kind="chapters", video_path="gone.mp4", model="test",
                     label="gone.mp4", spec={"origin": origin})
        parents.open("lvc-cli", kind="chapters", video_path="x.mp4", model="test",
                     label="x.mp4", spec={})  # the CLI's own run: not the service's
        parents.open("lvc-other", kind="chapters", video_path="y.mp4", model="other",
                     label="y.mp4", spec={"origin": origin})  # another model's
        parents.open("lvc-done", kind="chapters", video_path="z.mp4", model="test",
                     label="z.mp4", spec={"origin": origin})
        parents.finish("lvc-done", "done", {"document": {}})
        runs = LongRuns(SimpleNamespace(parents=parents), store, "test")
        assert [r["job_id"] for r in runs.open_rows()] == ["lvc-open"]
        asked: list[dict] = []

        def start(body: dict) -> None:
            asked.append(body)
            raise VideoError("cannot read video gone.mp4", hint="check that it exists")
        assert runs.resume(start) == 0
        row = store.get_job("lvc-open")
    assert asked == [origin["service"]]
    assert row["state"] == "failed" and "cannot read video" in row["error"]["message"]
