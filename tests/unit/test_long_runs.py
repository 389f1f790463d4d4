"""The app's long-video runs (``chord_ui.long_runs``): one run per key however often Run is
pressed, a failed or cancelled run starts again, a finished one is kept, and progress comes
from the run's parent row in the real SQLite store (written by the manager's parents)."""

from __future__ import annotations

import threading
import time

import pytest

from chord_core.errors import InputError, JobCancelled
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store
from chord_core.types import ProgressEvent
from chord_ui.long_runs import LongRunManager


def _wait(manager: LongRunManager, key: str, state: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        snap = manager.get(key)
        if snap is not None and snap["state"] == state:
            return snap
        time.sleep(0.01)
    raise AssertionError(f"{key} never {state}: {manager.get(key)}")


def test_one_run_per_key_and_a_finished_run_is_kept() -> None:
    manager, gate, calls = LongRunManager(), threading.Event(), []

    def work(run, on_progress):
        calls.append(run.key)
        on_progress(ProgressEvent("chunks", "chunks 1/3", 1, 3, 0.1))
        gate.wait(30)
        return {"chapters": 2}

    assert manager.start("clip:describe", "chapters", work)
    assert not manager.start("clip:describe", "chapters", work)  # a second click: same run
    assert manager.progress("clip:describe") in (None, {"stage": "chunks", "done": 1,
                                                        "total": 3, "eta_s": None,
                                                        "message": "chunks 1/3"})
    gate.set()
    snap = _wait(manager, "clip:describe", "done")
    assert snap["doc"] == {"chapters": 2} and snap["kind"] == "chapters"
    assert not manager.start("clip:describe", "chapters", work)
    assert calls == ["clip:describe"]


def test_failed_and_cancelled_runs_start_again() -> None:
    manager = LongRunManager()

    def fails(run, on_progress):
        raise InputError("the clip is gone", hint="give it again")

    manager.start("k", "ground", fails)
    snap = _wait(manager, "k", "failed")
    assert snap["error"]["message"] == "the clip is gone" and snap["error"]["hint"]

    def waits_for_cancel(run, on_progress):
        run.cancel.wait(30)
        raise JobCancelled("cancelled", hint="run it again")

    assert manager.start("k", "ground", waits_for_cancel)
    manager.cancel("k")
    _wait(manager, "k", "cancelled")
    assert manager.start("k", "ground", lambda run, on_progress: "ok")
    assert _wait(manager, "k", "done")["doc"] == "ok"


def test_a_crash_is_one_message_not_a_traceback() -> None:
    manager = LongRunManager()
    manager.start("k", "search", lambda run, on_progress: 1 / 0)
    err = _wait(manager, "k", "failed")["error"]
    assert err["message"].startswith("internal error: ZeroDivisionError") and err["hint"]


def test_progress_comes_from_the_runs_row_in_the_store(tmp_path) -> None:
    store = Store(tmp_path / "chord.sqlite3")
    manager, gate = LongRunManager(store), threading.Event()

    def work(run, on_progress):
        run.run_id = "lvc-0123456789ab"
        parents = ParentJobs(store)  # what the manager writes for a long run
        parents.open(run.run_id, kind="chapters", video_path="clip.mp4", model="test",
                     label="clip.mp4")
        parents.summarise(run.run_id, {"progress": {"stage": "chunks", "done": 4,
                                                    "total": 60, "eta_s": 93.5}})
        gate.wait(30)
        return None

    manager.start("k", "chapters", work)
    deadline = time.monotonic() + 30
    while (manager.progress("k") or {}).get("done") != 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert manager.progress("k") == pytest.approx(
        {"stage": "chunks", "done": 4, "total": 60, "eta_s": 93.5})
    gate.set()
    _wait(manager, "k", "done")
    store.close()


def test_a_run_is_found_by_its_parent_job_and_a_stored_one_is_adopted() -> None:
    manager, gate = LongRunManager(), threading.Event()
    assert manager.start("clip:describe", "chapters", lambda run, p: gate.wait(30),
                         run_id="lvc-0123456789ab")
    snap = manager.by_run("lvc-0123456789ab")  # named from the start: the URL can say it
    assert snap is not None and snap["key"] == "clip:describe" and snap["state"] == "running"
    assert manager.by_run("lvc-ffffffffffff") is None
    # a run finished before this server started: filed as done, once; a live run is kept
    adopted = manager.adopt("other:describe", "chapters", "lvc-111111111111", {"doc": 1})
    assert adopted["state"] == "done" and adopted["doc"] == {"doc": 1}
    assert manager.adopt("clip:describe", "chapters", "lvc-0123456789ab", {})["state"] == \
        "running"
    assert not manager.start("other:describe", "chapters", lambda run, p: None)
    gate.set()
    _wait(manager, "clip:describe", "done")


def test_outcome_and_long_run_states_are_str_enums() -> None:
    from chord_ui.long_runs import RunState
    from chord_ui.session import Outcome, OutcomeState

    out = Outcome("job-1", "cancelled")  # given as its word (History does)
    assert out.state is OutcomeState.CANCELLED and out.finished and f"{out.state}" == "cancelled"
    assert not Outcome("job-1", OutcomeState.RUNNING).finished
    assert Outcome("job-1", "done", settling=True).finished is False
    with pytest.raises(ValueError):
        Outcome("job-1", "exploded")
    assert [s.is_finished for s in RunState] == [False, True, True, True]
    manager = LongRunManager()
    manager.start("k", "search", lambda run, on_progress: "doc")
    snap = _wait(manager, "k", "done")
    assert snap["state"] is RunState.DONE and snap["state"] == "done"
