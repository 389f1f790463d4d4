"""What the service runs on: a JobManager (its own worker processes), the job store, and
the helpers every endpoint shares — submit, wait without blocking the event loop, look up a
job in memory or in the store, and count tokens for ``usage``.

The API process plans and starts its own workers (``cluster.start_manager``), exactly as the
app does; jobs go into the same SQLite store, so they show on the app's History page. Two
processes cannot share one manager: the store is shared, the workers are not
(``SharedStore`` keeps this process from resuming or re-queueing the app's jobs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

from starlette.concurrency import run_in_threadpool

from chord_core.runtime.jobs import JobSpec, JobStatus

log = logging.getLogger(__name__)

POLL_S = 0.05
GONE_CHECK_S = 0.5


class ClientGone(Exception):
    """The client disconnected while its jobs were running (they were cancelled)."""


class SharedStore:
    """The app's job store, seen by a second process: every write goes through, but at start
    the manager neither re-queues the other process's running jobs nor resumes its queue
    (they belong to the app's workers)."""

    def __init__(self, store: Any) -> None:
        self.inner = store

    def requeue_running(self) -> list[str]:
        return []

    def list_jobs(self, limit: int = 50, offset: int = 0, state: str | None = None,
                  **kwargs: Any) -> list[dict[str, Any]]:
        if state == "queued":  # only the manager's resume asks for this
            return []
        return self.inner.list_jobs(limit, offset, state, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class ServiceRuntime:
    """The manager and store the endpoints use. ``model`` is the served model's id."""

    manager: Any
    store: Any = None
    model: str = "test"
    plan_lines: tuple[str, ...] = ()
    started_at: float = field(default_factory=time.time)
    _tokenizer: Any = field(default=None, repr=False)

    async def submit(self, specs: Sequence[JobSpec]) -> list[str]:
        """Queue all specs at once (the dispatcher sees them together and batches them),
        off the event loop: the manager stores each job in SQLite before it returns."""
        def submit_all() -> list[str]:
            with self.manager.holding():
                return [self.manager.submit(s) for s in specs]

        return await run_in_threadpool(submit_all)

    async def wait_all(self, job_ids: Sequence[str], timeout_s: float,
                       gone: Callable[[], Awaitable[bool]] | None = None) -> list[JobStatus]:
        """Wait until every job finished. On timeout cancel the rest and raise TimeoutError;
        when ``gone()`` says the client hung up, cancel the rest and raise ClientGone (no one
        is left to read the answer: the workers should not keep computing it)."""
        deadline = time.monotonic() + timeout_s
        next_check = time.monotonic() + GONE_CHECK_S
        pending = list(dict.fromkeys(job_ids))
        while pending:
            pending = [j for j in pending if not self.manager.status(j).state.finished]
            if not pending:
                break
            if time.monotonic() > deadline:
                self._cancel(pending)
                raise TimeoutError(f"{len(pending)} job(s) unfinished after {timeout_s:g} s")
            if gone is not None and time.monotonic() > next_check:
                next_check = time.monotonic() + GONE_CHECK_S
                if await gone():
                    self._cancel(pending)
                    raise ClientGone(f"client left; {len(pending)} job(s) cancelled")
            await asyncio.sleep(POLL_S)
        return [self.manager.status(j) for j in job_ids]

    def _cancel(self, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            self.manager.cancel(job_id)
        log.info("cancelled %d unfinished job(s): %s", len(job_ids), ", ".join(job_ids))

    def live_status(self, job_id: str) -> JobStatus | None:
        """The job as this process's manager knows it, or None."""
        try:
            return self.manager.status(job_id)
        except KeyError:
            return None

    def stored_job(self, job_id: str) -> dict[str, Any] | None:
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


def start_runtime(model_cfg: Any, parallel: Any, *, executor: str = "local",
                  ray_address: str | None = "auto") -> ServiceRuntime:
    """Plan and start the workers (this machine's processes, or Ray actors) on the app's
    store; returns the runtime."""
    from chord_core.runtime.cluster import start_manager
    from chord_core.runtime.store import Store

    store = Store()
    for notice in store.notices:
        log.warning("%s", notice)
    manager, plan = start_manager(model_cfg, parallel, store=SharedStore(store),
                                  executor=executor, ray_address=ray_address)
    return ServiceRuntime(manager, store, model_cfg.model, tuple(plan.lines))
