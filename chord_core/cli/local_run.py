"""A CLI ``describe`` / ``ground`` / ``entail`` run in this process, kept in the job store.

The README promises that the library's search covers "the app, the CLI and the service
alike"; the CLI's own runs used to call the engine directly and store nothing, so
``search`` never found them. Now a local run goes through a job manager like every other
job — one worker thread in this process (``cluster.in_process_manager``), the model loaded
here as before — with the store of the data dir: the job and its result are written by the
manager, under its lease, and History, ``export`` and ``search`` see them.
``--no-store`` runs the engine alone and keeps nothing (as before). A store that cannot be
opened (a read-only data dir) is said and the run goes on unstored.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from chord_core.errors import ChordError

log = logging.getLogger(__name__)


def run_local(cfg: Any, request: Any, on_progress: Callable[[Any], None], *,
              store: bool = True) -> tuple[Any, tuple[str, Path] | None]:
    """The ``Result`` of ``request`` run here, and (job id, store file) where it is kept —
    None when ``store`` is False or the store could not be opened (then nothing is kept)."""
    from chord_core.analysis.engine import Engine

    if not store:
        return Engine(cfg).analyze(request, on_progress=on_progress), None
    from chord_core.runtime.store_read import StoreView

    try:
        db = StoreView.open()  # read here; the in-process manager writes the job
    except (ChordError, OSError) as exc:
        log.warning("the job store cannot be opened (%s): this run is not kept (search and "
                    "History will not show it)", getattr(exc, "message", exc))
        return Engine(cfg).analyze(request, on_progress=on_progress), None
    try:
        result, job_id, written = _managed(cfg, request, on_progress, db)
        return result, ((job_id, Path(db.path)) if written else None)
    finally:
        db.close()


def _managed(cfg: Any, request: Any, on_progress: Callable[[Any], None], db: Any) -> Any:
    from chord_core.errors import InternalError, from_record
    from chord_core.runtime.cluster import in_process_manager
    from chord_core.runtime.executors import ThreadExecutor
    from chord_core.runtime.jobs import JobSpec

    # one worker thread of this process, the model as given, with an engine that says where
    # its model went; others' queued jobs stay theirs (resume False). The manager writes db.
    manager = in_process_manager(cfg, store=db, resume=False, worker_id="cli0",
                                 executor=ThreadExecutor(_placing_engine(on_progress)))
    try:
        handle = manager.submit(JobSpec(request, model=cfg.model, label="cli"))
        stop = handle.on_change(_relay(handle, on_progress))
        try:
            status = handle.result()
        except KeyboardInterrupt:
            manager.cancel(handle.job_id)
            raise
        finally:
            stop()
        if status.result is not None and status.state.value == "done":
            if status.pending_write:
                log.warning("job %s: the store refused the result (%s); this run is not "
                            "kept", handle.job_id, (manager.store_problem() or {})
                            .get("message", "disk full?"))
            return status.result, handle.job_id, not status.pending_write
        err = from_record(status.error) or InternalError(
            f"the analysis ended {status.state.value}", hint="run it again")
        raise err
    finally:
        manager.shutdown()
        problem = manager.store_problem()
        if problem:
            log.warning("the job store: %s", problem.get("message"))


def _placing_engine(on_progress: Callable[[Any], None]) -> Callable[[Any], Any]:
    """An ``Engine`` factory whose engine tells ``on_progress`` when it loads its model and
    where the model went (the ``plan:`` line): the worker loads it before the job starts,
    so the job's own events do not carry it."""
    from chord_core.analysis.engine import Engine
    from chord_core.types import ProgressEvent

    class PlacingEngine(Engine):
        def load(self) -> Any:
            if self.loaded:
                return super().load()
            on_progress(ProgressEvent("loading_model", f"loading model {self.model_cfg.model}"))
            lm = super().load()
            on_progress(ProgressEvent("placed", f"model {lm.info.id} {lm.placement}"))
            return lm
    return PlacingEngine


def _relay(handle: Any, on_progress: Callable[[Any], None]) -> Callable[[], None]:
    """The job's progress events, each once and in order, to ``on_progress`` (on the
    dispatcher thread). The status keeps the latest events only: those after the last one
    passed on are found by identity."""
    last: list[Any] = [None]

    def changed() -> None:
        events = handle.status().events
        start = next((i + 1 for i in range(len(events) - 1, -1, -1)
                      if events[i] is last[0]), 0)
        for ev in events[start:]:
            on_progress(ev)
            last[0] = ev
    return changed


__all__ = ["run_local"]
