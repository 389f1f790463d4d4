"""The History page's store query: one row per job or run (children inside their parent),
filters by task, state and file name (stored name or label), sorts, pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from chord_core.runtime.store import Store
from chord_core.runtime.store_history import (
    HistoryQuery, history_count, history_rows, history_tasks)

T0 = 1_700_000_000.0


@pytest.fixture()
def store(tmp_path: Path):
    s = Store(tmp_path / "jobs.sqlite3")
    # (id, file, task, label, submitted offset, run seconds or None for queued)
    for job_id, name, task, label, at, run_s in [
        ("a", "street.mp4", "describe", "street.mp4", 0, 5.0),
        ("b", "3f9c0d.mp4", "ground", "dog walk.mp4", 10, 40.0),  # an upload: hashed name
        ("c", "harbour.avi", "entail", "harbour.avi", 20, 12.0),
        ("d", "queued.mp4", "describe", "queued.mp4", 30, None),
    ]:
        s.add_job(job_id, video_path=f"/clips/{name}", task=task, model="test",
                  spec={"label": label}, submitted_at=T0 + at)
        if run_s is not None:
            with s.transaction() as conn:
                conn.execute("UPDATE jobs SET state = 'done', started_at = ?, finished_at = ? "
                             "WHERE job_id = ?", (T0 + at, T0 + at + run_s, job_id))
    s.add_job("batch-1", video_path="", task="ground", model="test",
              spec={"label": "batch of 2"}, submitted_at=T0 + 40)
    for k in range(2):  # children of a parent (a batch), whoever made them
        s.add_job(f"batch-1-c{k}", video_path=f"/clips/b{k}.mp4", task="ground",
                  model="test", submitted_at=T0 + 41 + k, parent="batch-1")
    yield s
    s.close()


def _ids(store: Store, **kw) -> list[str]:
    return [r["job_id"] for r in history_rows(store, HistoryQuery(**kw), now=T0 + 100)]


@pytest.mark.parametrize(("kw", "ids"), [
    ({}, ["batch-1", "d", "c", "b", "a"]),
    ({"order": "oldest"}, ["a", "b", "c", "d", "batch-1"]),
    ({"order": "longest"}, ["b", "c", "a", "batch-1", "d"]),
    ({"task": "ground"}, ["batch-1", "b"]),
    ({"state": "done"}, ["c", "b", "a"]),
    ({"name": "DOG"}, ["b"]),  # the label: an upload's own name
    ({"name": "3f9c"}, ["b"]),  # the stored name too
    ({"name": ".avi"}, ["c"]),
    ({"name": "%"}, []),  # no LIKE wildcards: the text as it is
    ({"name": "b0.mp4"}, ["batch-1"]),  # a child is no row of its own: its batch is found
    ({"name": "b1.mp4", "state": "done"}, []),  # the parent's own state is the filter's
    ({"limit": 2, "offset": 2}, ["c", "b"]),
], ids=["newest", "oldest", "longest", "task", "state", "label", "stored-name", "ext",
        "no-wildcards", "child-finds-its-batch", "child-and-parent-state", "page-2"])
def test_history_query(store: Store, kw: dict, ids: list[str]) -> None:
    assert _ids(store, **kw) == ids
    assert history_count(store, HistoryQuery(**{k: v for k, v in kw.items()
                                                if k not in ("limit", "offset")})) == len(
        _ids(store, **{k: v for k, v in kw.items() if k not in ("limit", "offset")}))


def test_tasks_and_a_bad_sort(store: Store) -> None:
    assert history_tasks(store) == ["describe", "entail", "ground"]
    with pytest.raises(ValueError, match="unknown sort 'biggest'"):
        history_rows(store, HistoryQuery(order="biggest"))


def test_history_reads_through_the_stores_public_read_which_takes_no_write(
        tmp_path: Path) -> None:
    """store_history uses ``Store.read`` (not the private ``_read``); that read runs a SELECT
    and refuses anything else, so a query module cannot write behind the manager."""
    import inspect

    from chord_core.runtime import store_history

    assert "_read(" not in inspect.getsource(store_history)
    with Store(tmp_path / "chord.sqlite3") as s:
        s.add_job("a", video_path="/v/a.mp4", task="describe")
        assert [r[0] for r in s.read("SELECT job_id FROM jobs")] == ["a"]
        for sql in ("DELETE FROM jobs", "UPDATE jobs SET state = 'done'", "DROP TABLE jobs"):
            with pytest.raises(ValueError, match="SELECT"):
                s.read(sql)
        assert s.get_job("a")["state"] == "queued"
