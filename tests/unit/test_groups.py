"""Job groups (``runtime/groups.py``): the runtime follows a parent's children and ends the
parent by its policy; callers only build child specs.

The real manager, worker loop (threads) and SQLite store; the engine is replaced at its
boundary by a scripted fake: the query 'fail' fails, 'block' waits on a gate (honouring
cancel), anything else answers at once."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.errors import JobCancelled, VideoError
from chord_core.runtime.executors import ThreadExecutor
from chord_core.runtime.group_start import follow_group, live_group
from chord_core.runtime.groups import EndPolicy, GroupSpec
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.store import Store
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video
from tests.unit.fake_engine import LoadedEngine


class GateEngine(LoadedEngine):
    ran: list[str] = []
    gate = threading.Event()

    def analyze(self, request, *, on_progress=None, cancel=None, **_planned):
        GateEngine.ran.append(request.query)
        if request.query == "fail":
            raise VideoError("this clip cannot be read", hint="try another clip")
        if request.query == "block":
            while not GateEngine.gate.wait(0.01):
                if cancel is not None and cancel.is_set():
                    raise JobCancelled("cancelled")
        from tests.unit.test_store import make_result

        return make_result(request.query)  # a stored-shape Result (the store keeps it)


@pytest.fixture
def env(tmp_path: Path):
    GateEngine.ran, GateEngine.gate = [], threading.Event()
    clip = str(make_video(tmp_path / "c.mp4", duration_s=0.5, fps=4.0, size_wh=(64, 48)).path)
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(2, ModelConfig(model="m1")), store=store,
                   executor=ThreadExecutor(engine_factory=GateEngine))
    m.wait_ready(10)
    yield SimpleNamespace(manager=m, store=store, clip=clip)
    GateEngine.gate.set()
    m.shutdown(5)
    store.close()


def _children(clip: str, queries: list[str], *, keyed: bool = False) -> list[JobSpec]:
    return [JobSpec(AnalysisRequest(clip, "ground", q), label=f"clip-{i}",
                    key=f"key-{q}-{i}" if keyed else "") for i, q in enumerate(queries)]


def _group(parent: str = "batch-test") -> GroupSpec:
    return GroupSpec(parent, kind="batch", label="batch of clips", model="m1", noun="clip",
                     hint="each clip's error is in History")


@pytest.mark.parametrize(("policy", "state", "message"), [
    (EndPolicy.BEST_EFFORT, "failed", "1 of 3 clip(s) failed; the first, clip-1: this clip"),
    (EndPolicy.ALL, "done", None),
], ids=["best-effort-fails-the-parent", "all-answers-every-child"])
def test_a_failed_child_ends_the_parent_by_its_policy(env, policy, state, message) -> None:
    h = env.manager.submit_group(_group(), _children(env.clip, ["a", "fail", "b"]),
                                 policy=policy)
    outcome = h.result(timeout=20)
    assert outcome.state.value == state
    assert [st.state.value for st in outcome.statuses] == ["done", "failed", "done"]
    row = env.store.get_job("batch-test")
    assert row["state"] == state and row["task"] == "batch"
    assert row["summary"]["counts"] == {"done": 2, "failed": 1}
    assert row["summary"]["progress"] == {"stage": "clips", "done": 3, "total": 3}
    if message:
        assert outcome.error["type"] == "GroupFailed" and message in outcome.error["message"]
        assert row["error"]["type"] == "GroupFailed"
        assert outcome.error["hint"] == "each clip's error is in History"
    else:
        assert outcome.error is None and row["error"] is None
    kids = {r["job_id"] for r in env.store.list_jobs(limit=50) if r.get("parent") == "batch-test"}
    assert kids == {st.job_id for st in outcome.statuses}


def test_the_first_failure_cancels_the_rest(env) -> None:
    h = env.manager.submit_group(_group(), _children(env.clip, ["fail", "block", "block"]),
                                 policy=EndPolicy.FIRST_FAILURE)
    outcome = h.result(timeout=20)  # the blocked children never finish on their own
    assert outcome.state is JobState.FAILED
    assert outcome.error["message"] == "clip-0: this clip cannot be read"
    assert outcome.error["hint"] == "try another clip"  # the child's own hint
    assert sorted(st.state.value for st in outcome.statuses) == ["cancelled", "cancelled",
                                                                 "failed"]


def test_cancel_stops_the_running_children(env) -> None:
    """The blocked children never end on their own (their gate stays shut), so the group
    ending at all shows the cancel reached the children inside the workers. (No wall-clock
    bound tighter than the wait: it failed once on a loaded 2-core machine at 1 s.) All
    three block: with a quick third child, a worker handed it before its blocked one ran it
    to the end first (cancel() was 2 on a loaded machine)."""
    h = env.manager.submit_group(_group(), _children(env.clip, ["block", "block", "block"]))
    deadline = time.monotonic() + 10
    while GateEngine.ran.count("block") < 2:  # both workers are inside their child
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert h.cancel() == 3
    outcome = h.result(timeout=10)
    assert outcome.state is JobState.CANCELLED
    assert {st.state for st in outcome.statuses} == {JobState.CANCELLED}
    assert env.store.get_job("batch-test")["state"] == "cancelled"


def test_a_child_done_before_is_reused_not_run_again(env) -> None:
    first = env.manager.submit_group(_group("batch-1"), _children(env.clip, ["a", "b"],
                                                                   keyed=True))
    assert first.result(timeout=20).state is JobState.DONE
    ran = list(GateEngine.ran)
    again = env.manager.submit_group(_group("batch-2"), _children(env.clip, ["a", "b", "c"],
                                                                   keyed=True))
    outcome = again.result(timeout=20)
    assert outcome.state is JobState.DONE
    assert GateEngine.ran == ran + ["c"]  # only the new clip ran
    assert [c.reused for c in again.children] == [True, True, False]
    assert again.counts() == {"skipped": 2, "done": 1}


def test_children_only_the_store_knows_are_read_from_it_once_each(env, monkeypatch) -> None:
    """A group sent again to a new process (a /batch_predict request after a restart):
    every child is a job the store has done, read from it once — not once per child's end
    (each end summarises every child: 32 children were 2,048 reads, 0.4-0.9 s a request)."""
    from chord_core.runtime import groups

    queries = list("abcdef")
    first = env.manager.submit_group(_group("batch-1"), _children(env.clip, queries,
                                                                   keyed=True))
    assert first.result(timeout=20).state is JobState.DONE
    env.manager.shutdown(5)
    ran, reads, real = list(GateEngine.ran), [], groups.stored_status
    monkeypatch.setattr(groups, "stored_status",
                        lambda store, job_id: reads.append(job_id) or real(store, job_id))
    fresh = JobManager(cpu_specs(1, ModelConfig(model="m1")), store=env.store,
                       executor=ThreadExecutor(engine_factory=GateEngine))
    try:
        fresh.wait_ready(10)
        again = fresh.submit_group(_group("batch-2"), _children(env.clip, queries,
                                                                 keyed=True))
        assert again.result(timeout=20).state is JobState.DONE
        assert GateEngine.ran == ran  # nothing ran again
        assert again.counts() == {"skipped": len(queries)}
        assert env.store.get_job("batch-2")["summary"]["counts"] == {"skipped": len(queries)}
        assert sorted(reads) == sorted(c.job_id for c in again.children)  # once each
    finally:
        fresh.shutdown(5)


def test_the_same_live_parent_is_the_same_group_and_empty_groups_end_at_once(env) -> None:
    h = env.manager.submit_group(_group(), _children(env.clip, ["block"]))
    assert env.manager.submit_group(_group(), _children(env.clip, ["block"])) is h
    assert live_group(env.manager, "batch-test") is h
    GateEngine.gate.set()
    assert h.result(timeout=20).state is JobState.DONE
    assert live_group(env.manager, "batch-test") is None  # forgotten once ended
    empty = env.manager.submit_group(_group("batch-empty"), [])
    assert empty.done() and empty.result(0).state is JobState.DONE


def test_a_group_is_awaited_without_blocking_the_event_loop(env) -> None:
    h = env.manager.submit_group(_group(), _children(env.clip, ["block", "a"]))
    ticks = []

    async def main():
        async def tick():
            while not h.done():
                ticks.append(1)
                await asyncio.sleep(0.01)
        ticker = asyncio.ensure_future(tick())
        asyncio.get_running_loop().call_later(0.2, GateEngine.gate.set)
        outcome = await h
        await ticker
        return outcome

    outcome = asyncio.run(main())
    assert outcome.state is JobState.DONE and len(ticks) > 5


def test_follow_group_ends_a_parent_over_children_already_submitted(env) -> None:
    kids = [str(env.manager.submit(s)) for s in _children(env.clip, ["a", "fail"])]
    env.manager.parents.open("bp-x", kind="batch_predict", video_path="", model="m1",
                             label="request")
    h = follow_group(env.manager, GroupSpec("bp-x", kind="batch_predict", label="request"),
                     kids, policy=EndPolicy.ALL)
    assert h.result(timeout=20).state is JobState.DONE
    assert env.store.get_job("bp-x")["summary"]["counts"] == {"done": 1, "failed": 1}


# -- a stage: a long run's chunks (``JobManager.run_stage`` through ``longvideo.runs``) ----

def _run(env, run: str = "lvc-test", manager=None):
    from chord_core.longvideo.runs import ParentRun

    return ParentRun(manager or env.manager, run, kind="chapters", video_path=env.clip,
                     label="long.mp4", model="m1")


def _chunks(env, queries: list[str], run: str = "lvc-test"):
    from chord_core.longvideo.runs import ChunkJob

    return [ChunkJob(f"{run}-c{i:04d}", JobSpec(AnalysisRequest(env.clip, "ground", q),
                                                label=f"chunk {i + 1}/{len(queries)}"))
            for i, q in enumerate(queries)]


def test_a_stage_keeps_its_window_and_reuses_what_was_done(env) -> None:
    from chord_core.longvideo.runs import run_jobs

    seen: list[int] = []
    original = env.manager.submit

    def counting(spec, *, job_id=None):  # how many of the stage are unfinished at a submit
        seen.append(sum(1 for st in env.manager.jobs()
                        if st.spec.parent == "lvc-test" and not st.state.finished))
        return original(spec, job_id=job_id)

    env.manager.submit = counting
    out = run_jobs(env.manager, _run(env), _chunks(env, ["a", "b", "c", "d", "e"]),
                   in_flight=2)
    assert sorted(out) == [f"lvc-test-c{i:04d}" for i in range(5)] and max(seen) <= 1
    assert len(seen) == 5
    ran = list(GateEngine.ran)
    again = run_jobs(env.manager, _run(env), _chunks(env, ["a", "b", "c", "d", "e", "f"]),
                     in_flight=2)  # run again with one chunk more: only it runs
    assert sorted(again) == [f"lvc-test-c{i:04d}" for i in range(6)]
    assert GateEngine.ran == ran + ["f"]
    row = env.store.get_job("lvc-test")
    assert row["state"] == "running"  # the stage leaves the row to its driver
    assert row["summary"]["progress"]["done"] == 6 and row["summary"]["progress"]["resumed"] == 5


def test_a_run_resumed_by_a_new_process_reads_each_finished_chunk_once(env,
                                                                        monkeypatch) -> None:
    """A long run started again after a restart: each chunk the store has done is read
    from it once (it was two or three times: once to count it, once to decide to reuse it,
    once for its handle), and only the missing chunk runs."""
    from chord_core.longvideo.runs import run_jobs

    first = run_jobs(env.manager, _run(env), _chunks(env, ["a", "b", "c", "d"]), in_flight=2)
    env.manager.shutdown(5)
    ran, reads, real = list(GateEngine.ran), [], env.store.get_result
    monkeypatch.setattr(env.store, "get_result",
                        lambda job_id: reads.append(job_id) or real(job_id))
    fresh = JobManager(cpu_specs(1, ModelConfig(model="m1")), store=env.store,
                       executor=ThreadExecutor(engine_factory=GateEngine))
    try:
        fresh.wait_ready(10)
        again = run_jobs(fresh, _run(env, manager=fresh),
                         _chunks(env, ["a", "b", "c", "d", "e"]), in_flight=2)
    finally:
        fresh.shutdown(5)
    assert GateEngine.ran == ran + ["e"]
    assert sorted(reads) == sorted(first)  # once each, and none for the chunk that ran
    assert {k: r.to_dict() for k, r in again.items() if k in first} == \
        {k: r.to_dict() for k, r in first.items()}
    progress = env.store.get_job("lvc-test")["summary"]["progress"]
    assert (progress["resumed"], progress["done"], progress["total"]) == (4, 5, 5)


def test_a_failed_chunk_stops_the_stage_with_its_own_error(env) -> None:
    from chord_core.longvideo.runs import run_jobs

    with pytest.raises(VideoError) as err:
        run_jobs(env.manager, _run(env), _chunks(env, ["fail", "block", "block", "x"]),
                 in_flight=2)
    assert str(err.value).startswith("chunk 1/4: this clip cannot be read")
    assert "finished chunks are kept" in err.value.hint
    assert "x" not in GateEngine.ran  # never started: the first failure stopped the stage
    states = {st.job_id: st.state for st in env.manager.jobs() if st.spec.parent == "lvc-test"}
    assert JobState.RUNNING not in states.values() and JobState.QUEUED not in states.values()


def test_a_failure_while_the_window_starts_the_next_chunk_still_stops_it(env) -> None:
    """Chunk 1 fails while the window is starting chunk 2: the failure's sweep of unfinished
    children runs before chunk 2 is submitted, so it cannot see it. Chunk 2 (blocked until
    cancelled) is cancelled once submitted, and the stage ends with chunk 1's error; before,
    it ran on and the stage never ended (a hang of the default tier, once)."""
    from chord_core.longvideo.runs import run_jobs

    second = "lvc-test-c0001"
    swept = threading.Event()
    real_status, real_submit = env.manager.status, env.manager.submit

    def status(job_id):  # the sweep asks the manager about chunk 2 from the dispatcher
        if job_id == second and "dispatch" in threading.current_thread().name:
            swept.set()
        return real_status(job_id)

    def submit(spec, *, job_id=None):
        if job_id == second:  # hold chunk 2's submit until the sweep has passed it by
            assert swept.wait(10), "chunk 1's failure was not taken in"
        return real_submit(spec, job_id=job_id)

    env.manager.status, env.manager.submit = status, submit
    outcome: list[BaseException] = []

    def stage() -> None:
        try:
            run_jobs(env.manager, _run(env), _chunks(env, ["fail", "block", "x"]), in_flight=2)
        except BaseException as exc:  # noqa: BLE001 — what the stage ended with
            outcome.append(exc)

    t = threading.Thread(target=stage, daemon=True)
    t.start()
    t.join(20)
    hung = t.is_alive()
    GateEngine.gate.set()  # let a chunk 2 left running end, so the fixture can stop
    t.join(10)
    assert swept.is_set() and not hung, "the stage did not end: chunk 2 was never cancelled"
    assert len(outcome) == 1 and isinstance(outcome[0], VideoError), outcome
    assert str(outcome[0]).startswith("chunk 1/3: this clip cannot be read")
    assert real_status(second).state is JobState.CANCELLED
    assert "x" not in GateEngine.ran  # the window never started chunk 3


def test_a_cancel_stops_the_stage_at_once(env) -> None:
    from chord_core.longvideo.runs import run_jobs
    from chord_core.runtime.handles import CancelFlag

    cancel = CancelFlag()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(JobCancelled):
        run_jobs(env.manager, _run(env), _chunks(env, ["block"] * 4), in_flight=2,
                 cancel=cancel)
    assert time.monotonic() - t0 < 5.0
    assert GateEngine.ran.count("block") == 2  # the window's two; the others never started
