"""What the service runs on: a JobManager (its own worker processes), the job store, and
the helpers every endpoint shares — submit, wait without blocking the event loop, look up a
job in memory or in the store, and count tokens for ``usage``.

The API process plans and starts its own workers (``cluster.start_manager``), exactly as the
app does; jobs go into the same SQLite store, so they show on the app's History page. Two
processes cannot share one manager: the store is shared, the workers are not. Each holds a
lease (``runtime/leases.py``): this process resumes its own jobs after a crash or a restart
(a client polling an old id gets the result once it is done), and never the app's while the
app runs.

Waiting is on job handles (``runtime/handles.py``), never a polling loop: the event loop
awaits each job's completion and never takes the manager's lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from starlette.concurrency import run_in_threadpool

from chord_core.runtime.group_start import follow_group, live_group
from chord_core.runtime.groups import EndPolicy, GroupSpec
from chord_core.runtime.handles import JobHandle
from chord_core.runtime.jobs import JobSpec, JobStatus
from chord_core.runtime.protocols import JobRunner
from chord_core.runtime.store_rows import JobRow, StoreReader

if TYPE_CHECKING:
    from starlette.requests import Request

log = logging.getLogger(__name__)


class ClientGone(Exception):
    """The client disconnected while its jobs were running (they were cancelled)."""


async def _awaited(handle: JobHandle) -> JobStatus:
    return await handle


async def client_left(request: Request) -> None:
    """Return when the client of ``request`` disconnects. Its body has been read, so the
    ASGI server's next message is ``http.disconnect`` (what Starlette's streaming response
    listens for too): this waits on it, without polling."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


@dataclass
class ServiceRuntime:
    """The manager and store the endpoints use. ``model`` is the served model's id."""

    manager: JobRunner
    store: StoreReader | None = None
    model: str = "test"
    plan_lines: tuple[str, ...] = ()
    started_at: float = field(default_factory=time.time)
    _tokenizer: Any = field(default=None, repr=False)
    # requests waiting now on each job (and parent) id: two identical requests share jobs
    # (same content key), so one that times out or hangs up cancels only those no other
    # waiter needs. Touched only on the event loop, between awaits: no lock.
    _waiters: Counter[str] = field(default_factory=Counter, repr=False)
    # the long-video runs this process drives (``long_jobs.LongRuns``; made at first use)
    long_runs: Any = field(default=None, repr=False)
    batch_width: int = 0  # the workers' batch slots in all (a long run's chunks in flight)

    async def submit(self, specs: Sequence[JobSpec]) -> list[str]:
        """Queue all specs at once (the dispatcher sees them together and batches them),
        off the event loop: the manager stores each job in SQLite before it returns."""
        def submit_all() -> list[str]:
            with self.manager.holding():
                return [self.manager.submit(s) for s in specs]

        return await run_in_threadpool(submit_all)

    async def wait_all(self, job_ids: Sequence[str], timeout_s: float,
                       gone: Request | None = None, *, parent: str | None = None
                       ) -> list[JobStatus]:
        """Wait until every job finished. On timeout cancel the rest and raise TimeoutError;
        when the client of request ``gone`` hangs up, cancel the rest and raise ClientGone
        (no one is left to read the answer: the workers should not keep computing it). Only
        jobs no other live request waits on are cancelled (``waiting``): a second, identical
        request sharing them still gets every answer. ``parent``: the request's parent job,
        counted as waited on too (``stopped_waiting`` leaves it to the last waiter)."""
        handles = await run_in_threadpool(self._handles, job_ids)
        held = [h.job_id for h in handles] + ([parent] if parent else [])
        self._waiters.update(held)
        done = asyncio.ensure_future(asyncio.gather(*[_awaited(h) for h in handles]))
        left = asyncio.ensure_future(client_left(gone)) if gone is not None else None
        try:
            await asyncio.wait([f for f in (done, left) if f is not None], timeout=timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
            pending = [h.job_id for h in handles
                       if not h.done() and self._waiters[h.job_id] == 1]  # ours alone
        finally:
            self._waiters.subtract(held)  # no await since the count was read: one step
            self._waiters += Counter()  # drops the ids no one waits on any more
            if left is not None:
                left.cancel()
        if done.done():  # in the order asked (two tasks of one key share one job)
            by_id = {h.job_id: st for h, st in zip(handles, done.result())}
            return [by_id[str(j)] for j in job_ids]
        done.cancel()
        await run_in_threadpool(self._cancel, pending)
        if left is not None and left.done() and not left.cancelled():
            raise ClientGone(f"client left; {len(pending)} job(s) cancelled")
        raise TimeoutError(f"{len(pending)} job(s) unfinished after {timeout_s:g} s")

    def waiting(self, job_id: str) -> int:
        """How many requests wait on ``job_id`` (a job or a parent) now."""
        return self._waiters.get(job_id, 0)

    async def submit_parent(self, parent_id: str, specs: Sequence[JobSpec], *,
                            label: str) -> list[str]:
        """``specs`` as the children of the parent job ``parent_id`` (a ``/batch_predict``
        request), a runtime group (``JobManager.submit_group``, policy ALL: the parent ends
        done once every task has, whatever each one's outcome), off the event loop. A task
        whose content key the store has done is that job; one the manager still runs is
        attached to; the same request sent again is the same group. So a request sent
        again finishes each task once."""
        def submit_all() -> list[str]:
            group = GroupSpec(parent_id, kind="batch_predict", label=label, model=self.model,
                              spec={"tasks": len(specs)}, noun="task",
                              hint="each task's error is in its prediction")
            handle = self.manager.submit_group(group, specs, policy=EndPolicy.ALL)
            return [c.job_id for c in handle.children]

        return await run_in_threadpool(submit_all)

    async def stopped_waiting(self, parent_id: str) -> None:
        """The request stopped waiting (timed out, or its client left): its group ends
        cancelled once its children have (those no other request waits on were cancelled by
        ``wait_all``) — unless another request for the same parent still waits on it. An
        answered request leaves the end to its group. Off the event loop: a group whose
        children have all ended writes its row now."""
        if self.waiting(parent_id):
            log.info("%s: left to the other request still waiting on it", parent_id)
            return
        group = live_group(self.manager, parent_id)
        if group is not None:
            await run_in_threadpool(group.cancel, stop_children=False)

    def _handles(self, job_ids: Sequence[str]) -> list[Any]:
        return [j if isinstance(j, JobHandle) else handle_of(self.manager, self.store, j)
                for j in dict.fromkeys(job_ids)]

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            self.manager.cancel(job_id)
        log.info("cancelled %d unfinished job(s): %s", len(job_ids), ", ".join(job_ids))

    def cancel_children(self, parent_id: str) -> int:
        """Cancel the unfinished children of the parent ``parent_id`` (a ``/batch_predict``
        request's group in this process); returns how many. The request waiting on them
        answers with their errors; the parent's row ends cancelled once they answered."""
        group = live_group(self.manager, parent_id)
        cancelled = group.cancel() if group is not None else 0
        if cancelled:
            log.info("%s: cancelled %d child job(s)", parent_id, cancelled)
        return cancelled

    def live_status(self, job_id: str) -> JobStatus | None:
        """The job as this process's manager knows it, or None."""
        try:
            return self.manager.status(job_id)
        except KeyError:
            return None

    def stored_job(self, job_id: str) -> JobRow | None:
        """A job only the store knows (an earlier run, or the app's)."""
        if self.store is None:
            return None
        return self.store.get_job(job_id)

    def stored_result(self, job_id: str) -> dict[str, Any] | None:
        return None if self.store is None else self.store.get_result(job_id)

    # -- token counts for usage ------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the served model's tokenizer (the ``tokenizers`` library on
        its tokenizer.json: no model, no torch); words when the file is not on this machine."""
        tok = self._load_tokenizer()
        if tok is None:
            return len(text.split())
        return len(tok.encode(text, add_special_tokens=False).ids)

    def _load_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = _find_tokenizer(self.model) or False
        return self._tokenizer or None


def _find_tokenizer(model: str) -> Any:
    """``tokenizers.Tokenizer`` from the model's local files, or None (never downloads)."""
    from tokenizers import Tokenizer

    from chord_core.config import TEST_MODELS

    try:
        if model in TEST_MODELS:
            from chord_core.testing.checkpoints import ensure_test_model

            folder: Path | None = ensure_test_model(family=TEST_MODELS[model])
        elif Path(model).expanduser().is_dir():
            folder = Path(model).expanduser()
        else:
            from chord_core.model.hub import local_snapshot

            folder = local_snapshot(model)
        path = folder / "tokenizer.json" if folder else None
        return Tokenizer.from_file(str(path)) if path and path.is_file() else None
    except Exception as exc:  # noqa: BLE001 — usage counts fall back to words, said in logs
        log.warning("no tokenizer for %s (%s); usage counts are word counts", model, exc)
        return None


def handle_of(manager: JobRunner, store: StoreReader | None, job_id: str) -> JobHandle:
    """The job's handle: from the manager, or (a job done before this process started, which
    the manager never held) a finished one from the store. KeyError when neither has it."""
    from chord_core.runtime.jobs import stored_status

    try:
        return manager.handle(job_id)
    except KeyError:
        status = stored_status(store, job_id) if store is not None else None
        if status is None:
            raise
        return JobHandle.finished(status)


def resume_parents(manager: JobRunner, store: StoreReader | None) -> int:
    """``/batch_predict`` parents a crash left unfinished: each becomes a group over its
    stored children (resumed by the manager: same ids) and ends once they have, whether or
    not the client sends its request again. Returns how many are followed."""
    from chord_core.runtime.store_parents import children

    if store is None:
        return 0
    rows = [r for state in ("running", "queued")  # queued: claimed from the dead process
            for r in store.list_jobs(limit=1000, state=state, top_level=True)
            if (r.get("spec") or {}).get("long_run") == "batch_predict"]
    followed = 0
    for row in rows:
        kids = [c["job_id"] for c in children(store, row["job_id"])]
        try:
            for kid in kids:
                handle_of(manager, store, kid)
        except KeyError as exc:  # a child another live process runs: its request's own
            log.info("%s left to its own process (%s)", row["job_id"], exc)
            continue
        follow_group(manager, GroupSpec(row["job_id"], kind="batch_predict",
                                        label=row.get("video_name") or "api batch_predict",
                                        noun="task"), kids, policy=EndPolicy.ALL)
        followed += 1
    if followed:
        log.info("following %d /batch_predict request(s) a crash left unfinished", followed)
    return followed


def start_runtime(model_cfg: Any, parallel: Any, *, executor: str = "local",
                  ray_address: str | None = "auto") -> ServiceRuntime:
    """Plan and start the workers (this machine's processes, or Ray actors) on the app's
    store; returns the runtime."""
    from chord_core.runtime.cluster import start_manager
    from chord_core.runtime.store_read import StoreView

    store = StoreView.open()  # the service reads; its manager writes
    for notice in store.notices:
        log.warning("%s", notice)
    manager, plan = start_manager(model_cfg, parallel, store=store,
                                  executor=executor, ray_address=ray_address)
    resume_parents(manager, store)
    return ServiceRuntime(manager, store, model_cfg.model, tuple(plan.lines),
                          batch_width=len(plan.specs) * max(1, parallel.batch_size_per_gpu))
