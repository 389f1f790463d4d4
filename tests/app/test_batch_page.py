"""AppTest tests of the Batch page: clips from a folder or uploads run on the shared worker
processes; failures are readable; a finished batch re-queued skips what is done; Cancel all;
the ZIP; and the GPUs page marking which job runs on which GPU."""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

BATCH_PAGE = "views/batch.py"
RUN_TIMEOUT_S = 180.0


@pytest.fixture()
def clip_folder(tmp_path: Path) -> Path:
    """Two small real clips (one in a subfolder) and a text file named .mp4. Fresh seeds:
    the store is shared by the session, and equal content would be skipped."""
    from chord_core.testing.videos import make_text_as_mp4, make_video

    folder = tmp_path / "clips"
    (folder / "sub").mkdir(parents=True)
    seed = uuid.uuid4().int % 100_000
    make_video(folder / "a.mp4", duration_s=1.5, fps=10.0, size_wh=(160, 120), seed=seed)
    make_video(folder / "sub" / "b.mp4", duration_s=2.0, fps=10.0, size_wh=(160, 120),
               seed=seed + 1)
    make_text_as_mp4(folder / "notes.mp4")
    return folder


def _batch_page(new_app, max_new_tokens: int = 128):
    """The Batch page, with short descriptions (the random-weight model rambles)."""
    at = new_app().run()
    at.switch_page(BATCH_PAGE).run()
    at.sidebar.slider(key="max_new_tokens").set_value(max_new_tokens)
    return at.run()


def _finished(at) -> bool:
    return any(b.label == "Download results (ZIP)" for b in at.get("download_button"))


def _table(at):
    return next(d.value for d in at.dataframe if "stage" in d.value.columns)


def _states(at) -> dict[str, str]:
    table = _table(at)
    return dict(zip(table["clip"], table["state"]))


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def _queue_folder(at, folder: Path):
    at.text_input(key="batch_folder").input(str(folder)).run()
    at.button(key="batch_queue").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_batch_has_its_own_mode_and_target(new_app) -> None:
    """Analyze's mode and target do not silently become the batch's."""
    at = new_app().run()
    at.segmented_control(key="task").set_value("ground").run()
    at.text_input(key="ground_target").input("the square").run()
    at.switch_page("views/batch.py").run()
    assert not at.exception
    assert at.segmented_control(key="batch_task").value == "describe"
    at.segmented_control(key="batch_task").set_value("ground").run()
    assert at.text_input(key="batch_ground_target").value == ""


def test_widgets_present(new_app) -> None:
    at = _batch_page(new_app)
    assert not at.exception
    assert at.title[0].value == "Batch"
    uploader = at.file_uploader[0]
    assert uploader.accept_multiple_files
    assert set(uploader.allowed_type) >= {".mp4", ".mov", ".mkv", ".webm", ".avi"}
    assert at.text_input(key="batch_folder").value == ""
    assert at.segmented_control(key="batch_task").value == "describe"
    assert at.sidebar.radio(key="model_source").value == "Test model"
    assert at.sidebar.slider(key="max_new_tokens").value == 128  # same widgets as Analyze
    assert at.sidebar.number_input(key="max_frames").value == 768
    assert at.button(key="batch_queue").disabled  # nothing chosen yet
    assert not at.dataframe  # no batch yet


@pytest.mark.parametrize(("text", "expect"), [
    ("/nonexistent/chord-clips", "not a folder under the media roots"),
    ("EMPTY", "no video files in"),
], ids=["missing-folder", "empty-folder"])
def test_bad_folder_is_explained(new_app, tmp_path: Path, text: str, expect: str) -> None:
    if text == "EMPTY":
        (tmp_path / "empty").mkdir()
        text = str(tmp_path / "empty")
    at = _batch_page(new_app)
    at.text_input(key="batch_folder").input(text).run()
    assert not at.exception
    assert expect in at.error[0].value.lower() and "How to fix" in at.error[0].value
    assert at.button(key="batch_queue").disabled


@pytest.mark.slow
def test_folder_batch_runs_then_skips_what_is_done(new_app, poll, clip_folder: Path,
                                                   app_server) -> None:
    at = _batch_page(new_app)
    at.text_input(key="batch_folder").input(str(clip_folder)).run()
    assert "**3 clips** ready to queue" in " ".join(m.value for m in at.markdown)
    assert at.button(key="batch_queue").label == "Queue 3 clips"
    _queue_folder(at, clip_folder)
    poll(at, _finished, timeout=RUN_TIMEOUT_S)
    assert _states(at) == {"a.mp4": "done", "sub/b.mp4": "done", "notes.mp4": "failed"}
    table = _table(at)
    assert set(table["worker"][table["clip"] != "notes.mp4"]) == {"cpu0"}
    failure = " ".join(e.value for e in at.error)
    assert "notes.mp4" in failure.lower() and "text file, not a video" in failure
    assert "How to fix" in failure and "Traceback" not in failure
    assert _metric(at, "Analysed") == "2 / 3" and _metric(at, "Failed") == "1"
    assert _metric(at, "Throughput").endswith("/min")
    assert _metric(at, "Speed-up") == "one worker"  # one CPU worker: no figure
    workers = next(d.value for d in at.dataframe if "assigned" in d.value.columns)
    assert list(workers["worker"]) == ["cpu0"] and list(workers["devices"]) == ["CPU"]
    assert workers["assigned"][0] == 2 and workers["done"][0] == 2
    first = at.session_state["batch_run"]
    names = list(_table(at)["clip"])  # a row opens its clip's result in Analyze (?job=)
    at.session_state["batch_table"] = {"selection": {"rows": [names.index("a.mp4")],
                                                     "columns": [], "cells": []}}
    at = at.run()
    job_a = next(c.job_id for c in first.clips if c.name == "a.mp4")
    links = [p.proto for p in at.get("page_link")]
    # Analyze is the default page: its address is the app's root ("", as st.navigation has it)
    assert [(p.label, p.page) for p in links] == [("Open a.mp4 in Analyze", "")]
    assert links[0].page_script_hash  # a page st.navigation registered
    assert f"job={job_a}" in links[0].query_string and "lang=en" in links[0].query_string
    stored = app_server["store"].list_jobs(limit=10, batch_id=first.batch_id)
    assert {r["state"] for r in stored} == {"done", "failed"} and len(stored) == 3
    parent = app_server["store"].get_job(first.batch_id)  # one parent row, its clips inside
    assert parent["spec"]["long_run"] == "batch" and parent["state"] == "failed"
    assert {r["parent"] for r in stored} == {first.batch_id}
    assert parent["summary"]["progress"] == {"stage": "clips", "done": 3, "total": 3}

    assert at.button(key="batch_queue").disabled  # this session queued these clips already
    assert any("queued already" in c.value for c in at.caption)
    at = _batch_page(new_app)  # another session (a reload) queues the same folder again
    _queue_folder(at, clip_folder)
    poll(at, _finished, timeout=RUN_TIMEOUT_S)
    assert at.session_state["batch_run"].batch_id == first.batch_id  # the same parent
    assert _states(at) == {"a.mp4": "skipped", "sub/b.mp4": "skipped", "notes.mp4": "failed"}
    assert _metric(at, "Skipped") == "2"
    assert set(_table(at)["stage"][_table(at)["clip"] != "notes.mp4"]) == {"Done before"}


@pytest.mark.slow
def test_zip_has_results_and_summary(new_app, poll, clip_folder: Path, app_server) -> None:
    from chord_ui import batch_jobs

    at = _queue_folder(_batch_page(new_app), clip_folder)
    poll(at, _finished, timeout=RUN_TIMEOUT_S)
    run = at.session_state["batch_run"]
    manager, store = app_server["manager"], app_server["store"]
    states = [batch_jobs.clip_state(c, manager, store) for c in run.clips]
    metrics = batch_jobs.batch_metrics(run, states, manager.workers())
    with zipfile.ZipFile(io.BytesIO(batch_jobs.batch_zip(run, states, metrics, manager,
                                                         store))) as zf:
        names = sorted(zf.namelist())
        docs = {n: json.loads(zf.read(n)) for n in names}
    assert names == ["a.describe.json", "sub_b.describe.json", "summary.json"]
    assert docs["a.describe.json"]["schema"] == "chord.result/v1"
    assert docs["a.describe.json"]["video"]["path"].endswith("a.mp4")
    assert docs["a.describe.json"]["video"]["name"] == "a.mp4"  # as the Analyze download
    assert docs["sub_b.describe.json"]["video"]["name"] == "sub/b.mp4"
    summary = docs["summary.json"]
    assert summary["batch_id"] == run.batch_id and summary["model"] == "test"
    assert sum(summary["counts"].values()) == 3 and summary["counts"]["failed"] == 1
    assert run.started_at <= summary["finished_at"] <= run.started_at + summary["wall_s"] + 1
    bad = next(i for i in summary["items"] if i["video"].endswith("notes.mp4"))
    assert bad["error"]["type"] == "VideoError" and bad["out_json"] == ""


def test_uploads_are_queued(new_app, poll, app_clip: Path, app_env) -> None:
    data = app_clip.read_bytes()
    at = _batch_page(new_app)
    at.file_uploader[0].set_value([("one.mp4", data, "video/mp4"),
                                   ("two.mp4", data[: len(data) // 3], "video/mp4")]).run()
    assert at.button(key="batch_queue").label == "Queue 2 clips"
    at.button(key="batch_queue").click().run()
    poll(at, _finished, timeout=RUN_TIMEOUT_S)
    states = _states(at)
    assert set(states) == {"one.mp4", "two.mp4"}
    assert states["one.mp4"] in ("done", "skipped")  # the session clip may be done already
    saved = sorted(p.name for p in (app_env["data"] / "uploads").iterdir())
    assert len(saved) == 2 and all(n.endswith(".mp4") for n in saved)


def test_ground_needs_a_target(new_app, clip_folder: Path) -> None:
    at = _batch_page(new_app)
    at.segmented_control(key="batch_task").set_value("ground").run()
    _queue_folder(at, clip_folder)
    assert any("target" in e.value for e in at.error)
    assert "batch_run" not in at.session_state


def test_cancel_all(new_app, poll, clip_folder: Path, slow_engine) -> None:
    at = _batch_page(new_app)
    at.segmented_control(key="batch_task").set_value("ground").run()
    at.text_input(key="batch_ground_target").input("anything").run()
    _queue_folder(at, clip_folder)
    poll(at, lambda a: "running" in _states(a).values(), timeout=30)
    assert _states(at)["notes.mp4"] == "failed"
    at.button(key="batch_cancel").click().run()
    poll(at, _finished, timeout=30)
    states = _states(at)
    assert sorted(states.values()) == ["cancelled", "cancelled", "failed"]


class _FakeManager:
    """workers()/status() as JobManager gives them, with a job on GPUs 1 and 2."""

    def workers(self) -> list[dict]:
        return [{"worker": "gpu0", "devices": [0], "state": "ready", "job": None, "queued": 0,
                 "busy_s": 3.0, "tasks_done": 1, "restarts": 0, "speed": 1.0, "pid": 11},
                {"worker": "gpu1-2", "devices": [1, 2], "state": "ready", "job": "job-x",
                 "queued": 2, "busy_s": 75.0, "tasks_done": 4, "restarts": 1, "speed": 1.0,
                 "pid": 12}]

    def nodes(self) -> list[dict]:
        """As a manager on a two-node Ray cluster reports them."""
        return [{"node_id": "a1", "address": "10.0.0.1", "cpus": 16.0, "gpus": 2.0,
                 "head": True},
                {"node_id": "b2", "address": "10.0.0.2", "cpus": 16.0, "gpus": 1.0,
                 "head": False}]

    def status(self, job_id: str):
        from chord_core.analysis.request import AnalysisRequest
        from chord_core.runtime.jobs import JobSpec, JobState, JobStatus

        if job_id != "job-x":
            raise KeyError(job_id)
        spec = JobSpec(AnalysisRequest("/clips/street.mp4", "ground", "the bus"),
                       label="street.mp4")
        return JobStatus(job_id, spec, JobState.RUNNING, 0.0, started_at=1.0)


def test_gpus_page_marks_the_job_on_each_gpu(new_app, monkeypatch) -> None:
    from test_gpus_page import FakeSampler

    from chord_ui import resources

    sampler = FakeSampler(gpus=3)
    sampler._at = lambda t: [replace(g, job=None)  # no labels set on the sampler itself
                             for g in FakeSampler._at(sampler, t)]
    monkeypatch.setattr(resources, "gpu_sampler", lambda: sampler)
    at = new_app().run()
    monkeypatch.setattr(resources, "job_manager", lambda: _FakeManager())  # GPUs page only
    at.switch_page("views/gpus.py").run()
    assert not at.exception, [e.value for e in at.exception]
    gpus = at.dataframe[0].value
    assert list(gpus["job"]) == ["", "street.mp4 (ground) on gpu1-2",
                                 "street.mp4 (ground) on gpu1-2"]
    workers = next(d.value for d in at.dataframe if "tasks done" in d.value.columns)
    assert list(workers["devices"]) == ["cuda:0", "cuda:1, cuda:2"]
    assert list(workers["job"]) == ["—", "street.mp4 (ground)"]
    assert list(workers["busy"]) == ["3 s", "1:15"]
    util = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [t["name"] for t in util["data"]] == [
        "GPU 0", "GPU 1 · street.mp4 (ground) on gpu1-2", "GPU 2 · street.mp4 (ground) on gpu1-2"]
    assert any("worker" in m.value for m in at.markdown)  # the plan lines
    nodes = next(d.value for d in at.dataframe if "GPUs" in d.value.columns)
    assert list(nodes["node"]) == ["10.0.0.1 (head)", "10.0.0.2"]
    assert list(nodes["GPUs"]) == [2.0, 1.0]


# -- the workers behind the pages ------------------------------------------------------------

@pytest.mark.parametrize(("model", "started_on", "note"), [
    ("test", "test", ""),
    ("TINY", "TINY", ""),
    ("Qwen/Qwen2.5-VL-3B-Instruct", "test", "Qwen/Qwen2.5-VL-3B-Instruct is not available "
                                            "here (not downloaded)"),
    ("/nonexistent/qwen", "test", "/nonexistent/qwen is not available here (folder not found"),
], ids=["test-model", "local-folder", "hub-not-downloaded", "missing-folder"])
def test_workers_start_on_a_model_that_is_here(tiny_model_dir: Path, model: str,
                                               started_on: str, note: str) -> None:
    """Never a silent multi-GB download at server start: an unavailable model is loaded by
    the worker only when a job asks for it; until then the workers hold the test model."""
    from chord_core.config import ModelConfig
    from chord_ui.resources import _startup_model

    if model == "TINY":
        model = started_on = str(tiny_model_dir)
    cfg, text = _startup_model(ModelConfig(model=model))
    assert cfg.model == started_on
    assert text.startswith(note) if note else text == ""


@pytest.mark.parametrize(("env", "workers", "note"), [
    ({"CHORD_CPU_WORKERS": "3"}, 3, ""),
    ({"CHORD_CPU_WORKERS": "many"}, 0, "Parallel settings ignored"),
], ids=["cpu-workers", "invalid-value"])
def test_parallel_settings_from_env(monkeypatch, env: dict, workers: int, note: str) -> None:
    from chord_ui.resources import _parallel_config

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg, text = _parallel_config()
    assert cfg.cpu_workers == workers
    assert text.startswith(note) if note else text == ""
    if note:
        assert "CHORD_CPU_WORKERS" in text and "How to fix" in text


def _header_page(counts: dict[str, int], busy_s: dict[str, float], speedup: float) -> None:
    """The Batch page's header for a finished batch with these counts and workers."""
    from chord_ui import batch_view
    from chord_ui.batch_jobs import BatchMetrics, BatchRun

    run = BatchRun("batch-0123456789ab", "describe", "", "test", 1000.0, [],
                   finished_at=1060.0)
    batch_view._header(run, BatchMetrics(counts, sum(counts.values()), True, 60.0, busy_s,
                                         speedup, 1.0), live=False)


@pytest.mark.parametrize(("counts", "busy_s", "speedup", "analysed", "shown", "bar"), [
    ({"done": 3, "failed": 1, "skipped": 5}, {"cpu0": 58.2}, 0.97, "3 / 9", "one worker",
     "9 of 9 clips finished"),
    ({"done": 4}, {"cpu0": 30.0, "cpu1": 31.0, "cpu2": 0.0}, 1.02, "4 / 4", "none",
     "4 of 4 clips finished"),
    ({"done": 6, "cancelled": 2}, {"gpu0": 55.0, "gpu1": 57.0}, 1.87, "6 / 8", "×1.87",
     "8 of 8 clips finished"),
    ({"failed": 2}, {"cpu0": 3.0, "cpu1": 3.0}, 0.1, "0 / 2", "—", "2 of 2 clips finished"),
], ids=["one-worker", "two-workers-no-gain", "two-workers", "nothing-done"])
def test_header_counts_clips_and_says_speed_up_plainly(
        counts: dict[str, int], busy_s: dict[str, float], speedup: float, analysed: str,
        shown: str, bar: str) -> None:
    """Issue 39: "Speed-up ×0.97" on one worker read as a slow-down, and "Done 3 / 4" (of the
    clips not skipped) sat beside "9 of 9 finished" (of all clips). Both now count clips of
    the whole batch, and the speed-up is a figure only where more than one worker ran and it
    is ≥ ×1.05."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_header_page, args=(counts, busy_s, speedup)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metric(at, "Analysed") == analysed
    assert _metric(at, "Speed-up") == shown
    assert at.get("progress")[0].proto.text.startswith(bar + " · took ")
