"""Job handles (``runtime/handles.py``): done / result(timeout) / add_done_callback / await,
resolved from another thread; and no polling loop left in the runtime or the service."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from pathlib import Path

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.runtime.handles import Completion, JobHandle
from chord_core.runtime.jobs import JobSpec, JobState, JobStatus


def make(state: JobState = JobState.QUEUED) -> tuple[JobHandle, Completion, list[JobStatus]]:
    """A handle over a status box the test changes (as the dispatcher would)."""
    spec = JobSpec(AnalysisRequest("/clips/a.mp4", "describe"))
    box = [JobStatus("job-1", spec, state, time.time())]
    done = Completion()
    return JobHandle("job-1", done, lambda: box[0]), done, box


def finish(done: Completion, box: list[JobStatus], after_s: float = 0.0) -> threading.Thread:
    def run() -> None:
        time.sleep(after_s)
        from dataclasses import replace

        box[0] = replace(box[0], state=JobState.DONE, finished_at=time.time())
        done.set()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_handle_is_its_job_id() -> None:
    h, _, _ = make()
    assert h == "job-1" and h.job_id == "job-1" and type(h.job_id) is str
    assert {"job-1": 1}[h] == 1 and f"{h}" == "job-1"
    assert type(pickle.loads(pickle.dumps(h))) is str  # across processes: the plain id


def test_result_blocks_until_done_and_times_out_before() -> None:
    h, done, box = make()
    assert not h.done()
    with pytest.raises(TimeoutError, match="job-1 still queued after 0.05 s"):
        h.result(timeout=0.05)
    t = finish(done, box, 0.1)
    assert h.result(timeout=10).state is JobState.DONE and h.done()
    t.join()


def test_done_callbacks_run_once_before_or_after_and_a_bad_one_is_logged(caplog) -> None:
    h, done, box = make()
    seen: list[str] = []
    h.add_done_callback(lambda x: seen.append(f"early {x.status().state.value}"))
    h.add_done_callback(lambda x: 1 / 0)  # logged, does not stop the others
    h.add_done_callback(lambda x: seen.append("second"))
    finish(done, box).join()
    done.set()  # a second set changes nothing
    h.add_done_callback(lambda x: seen.append("late"))  # already done: runs at once
    assert seen == ["early done", "second", "late"]
    assert "done callback" in caplog.text and "ZeroDivisionError" in caplog.text


def test_await_resolves_from_another_thread_without_blocking_the_loop() -> None:
    h, done, box = make()

    async def main() -> tuple[JobState, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(tick())
        finish(done, box, 0.3)
        st = await asyncio.wait_for(h, timeout=10)
        ticker.cancel()
        return st.state, ticks

    state, ticks = asyncio.run(main())
    assert state is JobState.DONE and ticks >= 10  # the loop ran while it waited


def test_watchers_hear_each_change_and_stop_when_told() -> None:
    h, done, box = make()
    heard: list[int] = []
    stop = h.on_change(lambda: heard.append(1))
    done.changed()
    done.changed()
    stop()
    done.changed()
    assert heard == [1, 1]


@pytest.mark.slow
def test_a_manager_hands_back_handles_and_await_never_takes_its_lock(tmp_path: Path) -> None:
    """submit → handle; the handle resolves; awaiting it and reading status work while
    another thread holds the manager's lock (as the dispatcher does across SQLite commits)."""
    from chord_core.config import ModelConfig
    from chord_core.runtime.executors import ThreadExecutor
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.store import Store
    from chord_core.runtime.workers import cpu_specs
    from chord_core.testing.videos import make_video

    clip = make_video(tmp_path / "a.mp4", duration_s=1.0, fps=8.0, size_wh=(64, 48)).path
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(1, ModelConfig(model="test"), threads=1), store=store,
                   executor=ThreadExecutor())
    try:
        m.wait_ready(120)
        h = m.submit(JobSpec(AnalysisRequest(str(clip), "describe", max_new_tokens=8)))
        assert isinstance(h, JobHandle)
        assert h.result(120).state is JobState.DONE
        assert store.get_job(h)["state"] == "done"  # resolved after its write was made
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with m.holding():
                held.set()
                release.wait(10)
        t = threading.Thread(target=hold)
        t.start()
        held.wait(5)

        async def main() -> JobStatus:
            again = m.handle(h)  # a second handle of the same job
            return await asyncio.wait_for(again, timeout=2)
        try:
            assert asyncio.run(main()).state is JobState.DONE
            assert m.status(h).state is JobState.DONE
        finally:
            release.set()
            t.join()
        assert m.wait(h, 5).result is not None
    finally:
        m.shutdown()
        store.close()


def test_the_runtime_knows_every_task_in_one_table() -> None:
    from chord_core.analysis.request import TASKS
    from chord_core.errors import ConfigError
    from chord_core.runtime.scheduling import TaskPhase, WorkerState
    from chord_core.runtime.tasks import BATCHED_TASKS, TASK_TRAITS, traits

    assert set(TASK_TRAITS) == set(TASKS)
    assert BATCHED_TASKS == ("describe", "entail") and traits("ground").splits
    with pytest.raises(ConfigError, match="does not know the task 'count'"):
        traits("count")
    assert WorkerState.READY == "ready" and f"{WorkerState.READY}" == "ready"
    assert WorkerState.STOPPED.is_finished and not WorkerState.RESTARTING.is_finished
    assert {p for p in TaskPhase if p.is_finished} == {TaskPhase.DONE, TaskPhase.FAILED,
                                                       TaskPhase.STOPPED}


def test_a_cancel_flag_calls_back_when_set_and_at_once_when_it_was() -> None:
    from chord_core.runtime.handles import CancelFlag

    flag, heard = CancelFlag(), []
    stop = flag.on_set(lambda: heard.append("a"))
    flag.on_set(lambda: 1 / 0)  # a bad hook is logged, the others still run
    flag.on_set(lambda: heard.append("b"))
    stop()
    flag.set()
    assert flag.is_set() and flag.wait(0) and heard == ["b"]
    flag.on_set(lambda: heard.append("late"))
    assert heard == ["b", "late"]
    flag.set()  # set again: each hook was called once, and is not again
    assert heard == ["b", "late"]


def test_a_cancel_flag_set_while_its_hook_is_added_calls_it_once(monkeypatch) -> None:
    """The flag set between the hook's registration and ``on_set``'s look at the flag: the
    set's notify called the hook, then ``on_set`` called it again."""
    from chord_core.runtime.handles import CancelFlag

    flag, heard = CancelFlag(), []
    look = flag.is_set

    def set_then_look() -> bool:
        flag.set()  # another thread's cancel, landing in between
        return look()

    monkeypatch.setattr(flag, "is_set", set_then_look)
    flag.on_set(lambda: heard.append("hook"))
    assert heard == ["hook"]
