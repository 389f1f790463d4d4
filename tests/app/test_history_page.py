"""AppTest tests of the History page: finished jobs from the store, opened in the Analyze
views (with frames, or without when the clip is gone), failures with their message, delete
with a confirm, filters and paging."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

HISTORY_PAGE = "views/history.py"
JOB_TIMEOUT_S = 120.0


def _clip(tmp_path: Path, app_clip: Path) -> Path:
    """A copy of the session clip under a name no other test uses."""
    path = tmp_path / f"hist-{uuid.uuid4().hex[:8]}.mp4"
    shutil.copyfile(app_clip, path)
    return path


def _run(manager, path: Path, task: str = "describe", query: str = "") -> str:
    """Run one job on the shared worker processes, as the pages submit it."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.runtime.jobs import JobSpec

    request = AnalysisRequest(str(path), task, query, max_new_tokens=128)
    job_id = manager.submit(JobSpec(request, model="test", label=path.name))
    manager.wait(job_id, JOB_TIMEOUT_S)
    return job_id


def _history(new_app):
    at = new_app().run()
    return at.switch_page(HISTORY_PAGE).run()


def _table(at):
    return at.dataframe[0].value


def _select(at, clip: str):
    names = list(_table(at)["clip"])
    assert clip in names, names
    at.session_state["history_table"] = {"selection": {"rows": [names.index(clip)],
                                                       "columns": [], "cells": []}}
    return at.run()


def test_finished_job_is_listed_newest_first(new_app, app_server, app_clip, tmp_path) -> None:
    path = _clip(tmp_path, app_clip)
    _run(app_server["manager"], path)
    at = _history(new_app)
    assert not at.exception
    assert at.title[0].value == "History"
    table = _table(at)
    assert list(table.columns) == ["thumb", "time", "clip", "task", "state", "duration",
                                   "summary"]  # at 1280 px: no sideways scrolling
    first = table.iloc[0]
    assert (first["clip"], first["task"]) == (path.name, "describe")
    assert first["state"] == "done" and first["duration"] != "—"
    assert first["thumb"].startswith("data:image/jpeg;base64,")  # a frame of the clip
    assert first["summary"] != "—"  # the description's start
    assert any("Select a row" in c.value for c in at.caption)


def test_open_in_analyze_shows_the_result_with_frames(new_app, app_server, app_clip,
                                                      tmp_path, truth_engine) -> None:
    path = _clip(tmp_path, app_clip)
    job_id = _run(app_server["manager"], path, "ground", "green square")
    at = _select(_history(new_app), path.name)
    assert not at.error
    assert any(m.value.startswith("“green square” appears in ") for m in at.markdown)
    assert any(f"`{job_id}`" in c.value and "worker cpu0" in c.value for c in at.caption)
    at.button(key=f"open-{job_id}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Analyze a clip"
    assert at.subheader[0].value.startswith("“green square” appears in ")
    assert at.segmented_control(key="task").value == "ground"
    assert at.text_input(key="ground_target").value == "green square"
    players = [e for e in at.main if "chord_player" in repr(getattr(e, "proto", ""))]
    assert len(players) == 1 and len(at.dataframe) == 1  # the in-page player and the table
    assert len(at.image) >= 1  # key frames, read from the clip
    assert "Size **320×240**" in " ".join(m.value for m in at.markdown)  # probe facts
    assert not any("no longer at" in w.value for w in at.warning)


def test_open_in_analyze_when_the_clip_is_gone(new_app, app_server, app_clip, tmp_path,
                                               truth_engine) -> None:
    from chord_ui.formatting import md_escape

    path = _clip(tmp_path, app_clip)
    job_id = _run(app_server["manager"], path, "ground", "green square")
    path.unlink()
    at = _select(_history(new_app), path.name)
    gone = f"at {md_escape(str(path))} is gone or outside the media roots"
    assert any(gone in c.value for c in at.caption)
    at.button(key=f"open-{job_id}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Analyze a clip"
    notes = [w.value for w in at.warning]
    assert any(gone in n for n in notes), notes
    assert at.subheader[0].value.startswith("“green square” appears in ")
    assert len(at.get("plotly_chart")) == 1  # the timeline needs no frames
    assert len(at.dataframe) == 1  # the detections table neither
    assert len(at.image) == 0 and not any(b.key.startswith("make-mp4") for b in at.button)
    assert "Result JSON" in {b.label for b in at.get("download_button")}


def test_describe_result_opens_as_description(new_app, app_server, app_clip,
                                              tmp_path) -> None:
    path = _clip(tmp_path, app_clip)
    job_id = _run(app_server["manager"], path, "describe", "what moves?")
    at = _select(_history(new_app), path.name)
    assert "what moves?" in " ".join(m.value for m in at.markdown)
    at.button(key=f"open-{job_id}").click().run()
    assert at.subheader[0].value == "Description"
    assert at.text_area(key="describe_prompt").value == "what moves?"


def test_failed_job_shows_its_error_and_no_open(new_app, app_server, tmp_path) -> None:
    from chord_core.testing.videos import make_text_as_mp4

    bad = make_text_as_mp4(tmp_path / f"bad-{uuid.uuid4().hex[:6]}.mp4")
    job_id = _run(app_server["manager"], bad)
    at = _select(_history(new_app), bad.name)
    assert _table(at).iloc[0]["state"] == "failed"
    message = at.error[0].value
    assert "text file, not a video" in message and "How to fix" in message
    assert not [b for b in at.button if b.key == f"open-{job_id}"]


def test_delete_asks_then_removes_job_and_result(new_app, app_server, app_clip,
                                                 tmp_path) -> None:
    store = app_server["store"]
    path = _clip(tmp_path, app_clip)
    job_id = _run(app_server["manager"], path)
    assert store.get_result(job_id) is not None
    at = _select(_history(new_app), path.name)
    at.button(key=f"delete-{job_id}").click().run()
    assert "cannot be undone" in at.warning[0].value
    assert store.get_job(job_id) is not None  # nothing deleted before the confirm
    at.button(key="cancel_delete").click().run()
    assert store.get_job(job_id) is not None
    at.button(key=f"delete-{job_id}").click().run()
    at.button(key="confirm_delete").click().run()
    assert not at.exception
    assert store.get_job(job_id) is None and store.get_result(job_id) is None
    assert path.name not in list(_table(at)["clip"])
    assert at.success[0].value == f"Deleted the analysis of {path.name}."


@pytest.fixture()
def own_store(monkeypatch, tmp_path):
    """A store of its own, so counts and pages are exact, and a job manager on it (History
    deletes through the manager, the store's one writer): one worker thread whose engine
    loads nothing, and no job of the store resumed."""
    from chord_core.config import ModelConfig
    from chord_core.runtime.cluster import in_process_manager
    from chord_core.runtime.executors import ThreadExecutor
    from chord_core.runtime.store import Store
    from chord_ui import resources
    from tests.unit.fake_engine import LoadedEngine

    store = Store(tmp_path / "own.sqlite3")
    manager = in_process_manager(ModelConfig(model="test", device="cpu"), store=store,
                                 resume=False, executor=ThreadExecutor(LoadedEngine))
    monkeypatch.setattr(resources, "store", lambda: store)
    monkeypatch.setattr(resources, "job_manager", lambda: manager)
    yield store
    manager.shutdown()
    store.close()


def test_empty_history_says_so(new_app, own_store) -> None:
    at = _history(new_app)
    assert not at.exception and not at.dataframe
    assert "Nothing here yet" in at.info[0].value


@pytest.mark.parametrize(("show", "rows", "pages"), [
    ("all", 20, 2),
    ("failed", 5, 1),
    ("cancelled", 20, 1),
], ids=["all-paged", "failed-only", "cancelled-only"])
def test_filter_and_pages(new_app, own_store, show: str, rows: int, pages: int) -> None:
    for i in range(25):
        state = "failed" if i % 5 == 0 else "cancelled"
        own_store.add_job(f"job-{i:03d}", video_path=f"/clips/c{i:03d}.mp4", task="describe",
                          model="test", state=state, submitted_at=1_700_000_000 + i,
                          spec={"label": f"c{i:03d}.mp4"})
    at = _history(new_app)
    at.segmented_control(key="history_filter").set_value(show).run()
    assert len(_table(at)) == rows
    assert _table(at).iloc[0]["clip"] == ("c024.mp4" if show != "failed" else "c020.mp4")
    assert not at.number_input  # pages turn with buttons
    turns = {b.key: b for b in at.button if b.key in ("history_prev", "history_next")}
    assert len(turns) == (2 if pages > 1 else 0)
    if pages > 1:
        assert turns["history_prev"].disabled and not turns["history_next"].disabled
        at = at.button(key="history_next").click().run()
        assert list(_table(at)["clip"]) == [f"c{i:03d}.mp4" for i in range(4, -1, -1)]
        assert at.button(key="history_next").disabled
        assert "page 2 of 2" in [c.value for c in at.caption]
        at = at.button(key="history_prev").click().run()
        assert _table(at).iloc[0]["clip"] == "c024.mp4"


def _library(store) -> None:
    """Rows of three tasks and run times, one named only by the service's label."""
    for i, (name, task, run_s) in enumerate([("street.mp4", "describe", 4.0),
                                             ("harbour.avi", "ground", 30.0),
                                             ("dog.mp4", "entail", 9.0)]):
        job_id = f"job-{i}"
        store.add_job(job_id, video_path=f"/clips/{name}", task=task, model="test",
                      submitted_at=1_700_000_000 + i,
                      spec={"label": "api ground" if name == "harbour.avi" else name})
        with store.transaction() as conn:
            conn.execute("UPDATE jobs SET state = 'failed', started_at = ?, finished_at = ?, "
                         "error_json = ? WHERE job_id = ?",
                         (1_700_000_000 + i, 1_700_000_000 + i + run_s,
                          '{"message": "the file is gone"}', job_id))


@pytest.mark.parametrize(("task", "name", "sort", "clips"), [
    ("all", "", "newest", ["dog.mp4", "harbour.avi", "street.mp4"]),
    ("all", "", "oldest", ["street.mp4", "harbour.avi", "dog.mp4"]),
    ("all", "", "longest", ["harbour.avi", "dog.mp4", "street.mp4"]),
    ("ground", "", "newest", ["harbour.avi"]),
    ("all", "STREET", "newest", ["street.mp4"]),
    ("all", "nothing-like-it", "newest", []),
], ids=["newest", "oldest", "longest", "task", "name", "no-match"])
def test_filter_by_task_and_name_and_sort(new_app, own_store, task: str, name: str,
                                          sort: str, clips: list[str]) -> None:
    _library(own_store)
    at = _history(new_app)
    at.selectbox(key="history_task").set_value(task)
    at.text_input(key="history_name").set_value(name)
    at = at.selectbox(key="history_sort").set_value(sort).run()
    assert not at.exception
    if not clips:
        assert "No analysis matches these filters." in at.info[0].value
        return
    table = _table(at)
    assert list(table["clip"]) == clips  # the file's name, not the service's "api ground"
    assert set(table["summary"]) == {"the file is gone"}
    # no such file: no thumbnail and no error, a blank tile rather than the word "None"
    from chord_ui.history_table import NO_THUMB
    assert table.iloc[0]["thumb"] == NO_THUMB


def test_cancelled_job_with_partial_result_opens_in_analyze(new_app, app_server, app_clip,
                                                            tmp_path, truth_engine) -> None:
    """A cancelled grounding job that kept its finished frames (stored as cancelled, with a
    ``partial`` result) says so in History and opens in Analyze under the partial banner."""
    import dataclasses

    from chord_core.runtime.store import Store
    from chord_core.types import Result

    path = _clip(tmp_path, app_clip)
    done_id = _run(app_server["manager"], path, "ground", "green square")
    full = Result.from_dict(app_server["store"].get_result(done_id))
    kept = full.sampling.frame_indices[:3]
    part = dataclasses.replace(
        full, partial=True, sampling=dataclasses.replace(
            full.sampling, frame_indices=kept, timestamps_s=full.sampling.timestamps_s[:3]),
        detections=tuple(d for d in full.detections if d.frame_index in kept))
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    cut = tmp_path / f"cut-{path.name}"
    shutil.copyfile(path, cut)
    # the app's store is read-only (a StoreView): the row is seeded as another process would
    with Store(app_server["store"].path) as store:
        store.add_job(job_id, video_path=str(cut), task="ground", query="green square",
                      model="test", spec={"label": cut.name}, state="running")
        store.update_state(job_id, "cancelled")
        store.save_result(job_id, dataclasses.replace(part, video=dataclasses.replace(
            part.video, path=str(cut))).to_dict(), state="cancelled")
    at = _select(_history(new_app), cut.name)
    assert not at.exception
    assert any("Partial result" in w.value for w in at.warning), [w.value for w in at.warning]
    at.button(key=f"open-{job_id}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Analyze a clip"
    assert any(w.value.startswith("**Partial result**") for w in at.warning)
    assert any(i.value.startswith("Cancelled after") for i in at.info)


def _long_run(store, run: str = "lvc-0123456789ab", chunks: int = 3) -> None:
    """A chapters run as the job manager stores it: one parent row, its chunks children."""
    from chord_core.runtime.parents import ParentJobs
    from tests.unit.test_store import make_result

    parents = ParentJobs(store)
    parents.open(run, kind="chapters", video_path="/clips/long.mp4", model="test",
                 label="long.mp4", spec={"task": "describe", "video_key": "k"})
    for k in range(chunks):
        child = f"{run}-c{k:04d}"
        store.add_job(child, video_path="/clips/long.mp4", task="describe", model="test",
                      spec={"label": f"long.mp4 chunk {k + 1}/{chunks}"}, parent=run)
        if k == 0:
            store.save_result(child, make_result())
    parents.summarise(run, {"progress": {"stage": "chunks", "done": 1, "total": chunks}})


def test_a_long_run_is_one_row_with_its_chunks_inside(new_app, own_store) -> None:
    _long_run(own_store)
    own_store.add_job("job-short", video_path="/clips/short.mp4", task="describe",
                      model="test", spec={"label": "short.mp4"})
    at = _history(new_app)
    table = _table(at)
    assert sorted(table["clip"]) == ["long.mp4", "short.mp4"]  # no chunk rows of their own
    assert list(table[table["clip"] == "long.mp4"]["task"]) == ["chapters (long video)"]
    at = _select(at, "long.mp4")
    assert not at.exception
    kids = at.dataframe[1].value
    assert list(kids["job"]) == [f"long.mp4 chunk {k}/3" for k in (1, 2, 3)]
    assert list(kids["state"]) == ["done", "queued", "queued"]
    assert "3 job(s) in this run" in [c.value for c in at.caption]
    assert any(b.key == "open-lvc-0123456789ab" for b in at.button)


def test_deleting_a_long_run_deletes_its_chunks(new_app, own_store) -> None:
    _long_run(own_store)
    own_store.update_state("lvc-0123456789ab", "cancelled")
    at = _select(_history(new_app), "long.mp4")
    assert "Stopped part-way" in at.info[0].value
    at.button(key="delete-lvc-0123456789ab").click().run()
    at.button(key="confirm_delete").click().run()
    assert not at.exception
    assert own_store.count_jobs() == 0 and own_store.get_result("lvc-0123456789ab-c0000") is None


def test_a_batch_is_one_row_and_its_clips_open_by_their_own_link(new_app, own_store,
                                                                  app_clip) -> None:
    """A batch as a parent job (whoever made it): one History row; inside, each clip with
    its own run time, and a finished clip opens in Analyze with ``?job=`` of that clip."""
    from chord_core.runtime.parents import ParentJobs
    from tests.unit.test_store import make_result

    ParentJobs(own_store).open("batch-0123456789ab", kind="batch", video_path="",
                               model="test", label="batch of 2 clips")
    for k, run_s in enumerate((3.0, 7.0)):
        child = f"batch-0123456789ab-c{k}"
        own_store.add_job(child, video_path=str(app_clip), task="describe", model="test",
                          spec={"label": f"clip{k}.mp4"}, parent="batch-0123456789ab")
        own_store.update_state(child, "running")
        own_store.save_result(child, make_result())
        with own_store.transaction() as conn:
            conn.execute("UPDATE jobs SET started_at = 1000, finished_at = ? WHERE job_id = ?",
                         (1000 + run_s, child))
    at = _history(new_app)
    assert list(_table(at)["clip"]) == ["batch of 2 clips"]  # no rows of its clips
    assert _table(at)["thumb"][0].startswith("data:image/jpeg;base64,")  # its first clip's
    at = _select(at, "batch of 2 clips")
    assert not at.exception and not at.info  # not a long run's "stopped part-way"
    kids = at.dataframe[1].value
    assert list(kids["job"]) == ["clip0.mp4", "clip1.mp4"]
    assert list(kids["duration"]) == ["3 s", "7 s"]  # their own, not the batch's
    at.session_state["children-batch-0123456789ab"] = {
        "selection": {"rows": [1], "columns": [], "cells": []}}
    at = at.run()
    at.button(key="open-batch-0123456789ab-c1").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Analyze a clip"
    assert at.query_params.get("job") == "batch-0123456789ab-c1"
    assert at.query_params.get("lang") == "en"  # the link carries the language (issue 39)
    assert _table(_history(new_app))["task"][0] == "Batch"  # a word, not the raw kind

    at = new_app()  # the batch's own link: not opened as a long run, says where it is
    at.query_params["job"] = "batch-0123456789ab"
    at.run()
    assert not at.exception and not at.warning
    assert "names a batch (batch-0123456789ab), not one clip" in at.info[0].value
    assert "job" not in at.query_params and not at.subheader  # no chapters, no long run


class _NoResults:
    """A store that has no stored result for any job."""

    def get_result(self, job_id: str) -> None:
        return None


def _row(state: str, spec: dict | None = None, summary: dict | None = None) -> dict:
    return {"job_id": "j1", "submitted_at": 0.0, "started_at": None, "finished_at": None,
            "state": state, "task": "describe", "query": "", "model": "test",
            "spec": spec or {}, "summary": summary, "error": None, "video_path": ""}


_BATCH = {"long_run": "batch"}


@pytest.mark.parametrize(("row", "text"), [
    (_row("done", _BATCH, {"task": "describe", "counts": {"done": 10},
                           "progress": {"stage": "clips", "done": 10, "total": 10}}),
     "10 clip(s) described, 0 failed"),
    (_row("failed", _BATCH, {"task": "ground", "query": "a dog", "counts": {"done": 8,
                                                                             "failed": 2}}),
     "8 clip(s) searched for “a dog”, 2 failed"),
    (_row("done", _BATCH, {"task": "describe", "counts": {"done": 2, "skipped": 5}}),
     "7 clip(s) described, 0 failed, 5 reused from earlier runs"),
    (_row("done", {"long_run": "batch_predict"}, {"counts": {"done": 3, "cancelled": 1}}),
     "3 analysed, 0 failed, 1 cancelled"),
    (_row("running", _BATCH, {"progress": {"stage": "clips", "done": 3, "total": 9}}),
     "running: 3 of 9 finished"),
    (_row("queued"), "waiting in the queue"),
    (_row("running"), "still running"),
    (_row("done"), "no result stored"),
    (_row("cancelled"), "cancelled before a result"),
], ids=["batch-done", "batch-some-failed", "batch-reused", "api-batch-cancelled",
        "batch-running", "queued", "running", "done-no-result", "cancelled-no-result"])
def test_summary_says_what_happened(row: dict, text: str) -> None:
    """Issue 39: a finished batch said "10 of 10 done" and a row without a result "—". The
    summary column now says what was done and how many failed, or why there is nothing."""
    from chord_ui.history_table import summary_text, table_rows

    assert summary_text(row, _NoResults()) == text
    if not row["spec"]:  # the table's cell is the same text (a parent reads its children)
        assert table_rows([row], _NoResults())[0]["summary"] == text


def test_batch_summary_in_chinese(monkeypatch: pytest.MonkeyPatch) -> None:
    from chord_ui import history_table, i18n

    monkeypatch.setattr(i18n, "lang", lambda: "zh")
    monkeypatch.setattr(history_table, "lang", lambda: "zh")
    assert history_table.counts_summary({"task": "describe", "counts": {"done": 9,
                                                                        "failed": 1}}) == (
        "已描述 9 个视频，1 个失败")


def test_filters_and_page_are_kept_in_the_url(new_app, own_store) -> None:
    _library(own_store)
    for i in range(22):  # 22 more failed describe jobs: two pages
        own_store.add_job(f"more-{i:02d}", video_path=f"/clips/m{i:02d}.mp4", task="describe",
                          model="test", state="failed", submitted_at=1_600_000_000 + i)
    at = _history(new_app)
    assert not {"show", "task", "name", "sort", "page"} & set(at.query_params)  # defaults
    at.segmented_control(key="history_filter").set_value("failed")
    at.selectbox(key="history_task").set_value("describe")
    at = at.selectbox(key="history_sort").set_value("oldest").run()
    at = at.button(key="history_next").click().run()
    kept = {k: "".join(at.query_params[k]) for k in ("show", "task", "sort", "page")}
    assert kept == {"show": "failed", "task": "describe", "sort": "oldest", "page": "2"}
    shown = list(_table(at)["clip"])
    again = new_app()  # a reload of that URL: a new session with the same parameters
    for key, value in kept.items():
        again.query_params[key] = value
    again = again.run().switch_page(HISTORY_PAGE).run()
    assert not again.exception
    assert again.segmented_control(key="history_filter").value == "failed"
    assert again.selectbox(key="history_sort").value == "oldest"
    assert list(_table(again)["clip"]) == shown
    assert "page 2 of 2" in [c.value for c in again.caption]
    bad = new_app()  # values that are not choices are left out, never an error
    for key, value in {"show": "everything", "sort": "random", "page": "x9"}.items():
        bad.query_params[key] = value
    bad = bad.run().switch_page(HISTORY_PAGE).run()
    assert not bad.exception and bad.segmented_control(key="history_filter").value == "all"
