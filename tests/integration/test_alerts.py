"""A standing check fires once for a clip whose statement the test makes true.

The tiny model's weights are random, so the one thing faked is the scorer at the model
boundary (``entailment.score_batches``: pixels in, P(entailment) out): a frame "entails" the
statement when the synthetic clip's green square is in its left third. Everything around it
is real: the watcher finds the files, the job manager runs the describe and entail jobs (a
worker thread, the tiny model's sampling, frame times from the container), the store keeps
them, the alert table fires once per clip and moment, the hook command runs, and the
service streams the alert (``GET /v1/alerts/events``) from a real uvicorn."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
STATEMENT = "the green square is on the left"


def fake_score_batches(lm, batches, *, total=0, cancel=None, on_batch=None,  # noqa: ANN001
                       think_tokens=None):
    from chord_core.analysis.entailment import EntailScore

    scores = []
    for images, *_rest in batches:  # (images, statements[, budgets])
        for image in images:
            rgb = np.asarray(image).astype(int)
            green = (rgb[..., 1] > 150) & (rgb[..., 0] < 100) & (rgb[..., 2] < 100)
            xs = np.nonzero(green)[1]
            p = 0.95 if xs.size and xs.mean() < rgb.shape[1] / 3 else 0.05
            scores.append(EntailScore({"entailment": p, "neutral": (1 - p) / 2,
                                       "contradiction": (1 - p) / 2}, 1.0))
    return scores, 0.0, 0.0


@pytest.fixture
def watched(tmp_path, monkeypatch, tiny_model_dir):
    from chord_core.runtime.store import Store

    media = tmp_path / "media"
    (media / "yard").mkdir(parents=True)
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    monkeypatch.setattr("chord_core.analysis.entailment.score_batches", fake_score_batches)
    store = Store(tmp_path / "data" / "chord.sqlite3")
    yield media / "yard", store, tmp_path / "hook.jsonl"
    store.close()


def _watcher(manager, store, folder: Path, hook_out: Path,  # noqa: ANN001, ANN202
             statements: tuple[str, ...] = (STATEMENT,)):
    """A watcher with its standing checks over the folder's clips as they are now
    (``--once``), started; ``_run_until_idle`` waits for it."""
    from chord_core.library.alerts import StandingChecks
    from chord_core.library.watch import FolderWatcher, WatchSettings

    hook = (f"{sys.executable} -c \"import sys; open({str(hook_out)!r}, 'a')"
            f".write(sys.stdin.read() + chr(10))\"")
    settings = WatchSettings(str(folder), "describe", model="test", max_new_tokens=8,
                             settle_s=0.2, rescan_s=0.5, statements=statements,
                             threshold=0.8, hook=hook)
    watcher = FolderWatcher(manager, store, settings)
    watcher.once = True
    checks = StandingChecks(manager, store, watcher)
    return watcher.start(), checks


def _run_until_idle(watcher, checks, timeout: float = 180) -> None:  # noqa: ANN001
    """Every clip described, checked, its alerts stored and hooks run (the watcher's own
    thread does it, woken by handles; this only waits for its ``finished``)."""
    assert watcher.finished.wait(timeout), f"not idle: {watcher.table.rows()}"
    watcher.stop()


def test_an_alert_fires_once_for_the_clip_whose_statement_is_true(watched):
    from chord_core.config import ModelConfig
    from chord_core.library.alerts import latest_alerts
    from chord_core.runtime.cluster import in_process_manager

    folder, store, hook_out = watched
    clip = make_video(folder / "gate.mp4", duration_s=3.0, fps=10.0, size_wh=(192, 108))
    make_video(folder / "empty.mp4", duration_s=2.0, fps=10.0, size_wh=(192, 108),
               boxes=False, seed=7)  # no square: the statement is never true
    manager = in_process_manager(ModelConfig(model="test", device="cpu"), store=store)
    try:
        watcher, checks = _watcher(manager, store, folder, hook_out)
        _run_until_idle(watcher, checks)
        alerts = latest_alerts(watcher.index)
        assert len(alerts) == 1, alerts
        alert = alerts[0]
        assert Path(alert["path"]).name == "gate.mp4" and alert["statement"] == STATEMENT
        assert alert["probability"] == pytest.approx(0.95)
        # the square starts at the left: the moment starts at the first sampled frame and
        # ends before the middle of the clip; evidence frames are inside it
        assert alert["start_s"] == pytest.approx(clip.timestamps_s[0] if clip.timestamps_s
                                                 else 0.0, abs=0.11)
        assert alert["start_s"] < alert["end_s"] < 1.5
        assert alert["evidence"] and all(alert["start_s"] <= e["t_s"] <= alert["end_s"]
                                         for e in alert["evidence"])
        assert alert["hook"] == "exit 0"
        run = alert["hook_run"]
        assert run["exit_code"] == 0 and run["outcome"] == "exit 0" and run["duration_s"] > 0
        [line] = hook_out.read_text().splitlines()
        assert json.loads(line)["statement"] == STATEMENT
        # started again over the same store: nothing analysed, checked or fired twice
        again, checks2 = _watcher(manager, store, folder, hook_out)
        _run_until_idle(again, checks2)
        assert len(latest_alerts(again.index)) == 1
        assert len(hook_out.read_text().splitlines()) == 1
        jobs = store.list_jobs(100)
        assert sorted((Path(j["video_path"]).name, j["task"]) for j in jobs) == [
            ("empty.mp4", "describe"), ("empty.mp4", "entail"),
            ("gate.mp4", "describe"), ("gate.mp4", "entail")]
        _alert_streams_from_the_service(store, alert)
    finally:
        manager.shutdown()


def _alert_streams_from_the_service(store, alert) -> None:  # noqa: ANN001
    import uvicorn
    from service_helpers import free_port

    from chord_core.service.app import create_app
    from chord_core.service.runtime import ServiceRuntime
    from chord_core.service.settings import ServiceSettings

    port = free_port()
    app = create_app(ServiceRuntime(manager=None, store=store), ServiceSettings(port=port))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        started_by = time.monotonic() + 30
        while not srv.started and thread.is_alive() and time.monotonic() < started_by:
            time.sleep(0.05)  # polling a flag, bounded: uvicorn has no started event
        assert srv.started, "the service did not start within 30 s"
        url = f"http://127.0.0.1:{port}"
        events = []
        with httpx.stream("GET", url + "/v1/alerts/events", params={"timeout": 1.5},
                          timeout=20) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: {}":
                    events.append(json.loads(line[6:]))
        assert [(e["id"], e["statement"], e["start_s"]) for e in events] == [
            (alert["id"], STATEMENT, alert["start_s"])]
        later = httpx.get(url + "/v1/alerts/events", params={"after": alert["id"],
                                                             "timeout": 0.6}, timeout=20)
        assert "event: alert" not in later.text  # nothing after the last one seen
        assert httpx.get(url + "/v1/alerts", timeout=20).json()["alerts"][0]["id"] == \
            alert["id"]
    finally:
        srv.should_exit = True
        thread.join(10)


NEW_STATEMENT = "a green square is near the left edge"


def test_a_new_statement_checks_the_clips_done_before_once_each(watched):
    """Statements added to a folder (a restart with one more) are checked on the clips it
    finished before, once each; the old statement is not checked again, nothing is
    described again, and each alert fires once per clip and moment."""
    from chord_core.config import ModelConfig
    from chord_core.library.alerts import latest_alerts
    from chord_core.runtime.cluster import in_process_manager

    folder, store, hook_out = watched
    make_video(folder / "gate.mp4", duration_s=3.0, fps=10.0, size_wh=(192, 108))
    make_video(folder / "empty.mp4", duration_s=2.0, fps=10.0, size_wh=(192, 108),
               boxes=False, seed=7)
    manager = in_process_manager(ModelConfig(model="test", device="cpu"), store=store)
    try:
        watcher, checks = _watcher(manager, store, folder, hook_out)
        _run_until_idle(watcher, checks)
        assert [a["statement"] for a in latest_alerts(watcher.index)] == [STATEMENT], (
            watcher.table.rows(), watcher.table.checks("done"))
        both = (STATEMENT, NEW_STATEMENT)
        again, checks2 = _watcher(manager, store, folder, hook_out, both)
        _run_until_idle(again, checks2)
        assert checks2.backfill() == 0  # claimed once, at the restart: not again
        alerts = latest_alerts(again.index)
        assert sorted((Path(a["path"]).name, a["statement"]) for a in alerts) == [
            ("gate.mp4", NEW_STATEMENT), ("gate.mp4", STATEMENT)], (
            alerts, again.table.checks("done"), again.table.checks("error"))
        third, checks3 = _watcher(manager, store, folder, hook_out, both)
        _run_until_idle(third, checks3)
        assert len(latest_alerts(third.index)) == 2
        assert len(hook_out.read_text().splitlines()) == 2
        jobs = sorted((Path(j["video_path"]).name, j["task"], j["query"])
                      for j in store.list_jobs(100))
        assert jobs == sorted([("empty.mp4", "describe", ""), ("gate.mp4", "describe", ""),
                               *((n, "entail", s) for n in ("empty.mp4", "gate.mp4")
                                 for s in both)]), jobs
    finally:
        manager.shutdown()


def test_a_watch_saved_in_the_app_runs_its_checks_and_alerts(watched):
    """The Library page's saved watch (library/watch_saved.py) run as app.py runs it:
    ``AppWatches.sync`` starts a real watcher with its standing check over the manager, the
    clip is described and checked, the alert is stored once; removing the row stops it."""
    from chord_core.config import ModelConfig
    from chord_core.library.alerts import latest_alerts
    from chord_core.library.index import LibraryIndex, store_path
    from chord_core.library.watch_saved import (
        AppWatches, remove_watch, save_watch, saved_watches, watch_state)
    from chord_core.runtime.cluster import in_process_manager

    folder, store, _ = watched
    make_video(folder / "gate.mp4", duration_s=3.0, fps=10.0, size_wh=(192, 108))
    index = LibraryIndex(store_path(store))
    row = save_watch(index, str(folder), statements=[STATEMENT], threshold=0.8)
    manager = in_process_manager(ModelConfig(model="test", device="cpu"), store=store)
    runner = AppWatches(manager, store, "test")
    try:
        runner.sync(saved_watches(index))
        watch = runner.watch_id(row["id"])
        assert watch is not None and not runner.errors
        deadline = time.monotonic() + 180
        while not latest_alerts(index) and time.monotonic() < deadline:
            time.sleep(0.5)  # the watcher's own threads do the work; this only looks
        [alert] = latest_alerts(index)
        assert (Path(alert["path"]).name, alert["statement"]) == ("gate.mp4", STATEMENT)
        state = watch_state(index, watch)
        assert (state["done"], state["alerts"]) == (1, 1), state
        remove_watch(index, row["id"])
        runner.sync(saved_watches(index))
        assert runner.running == {} and runner.watch_id(row["id"]) is None
    finally:
        runner.stop()
        manager.shutdown()
        index.close()
