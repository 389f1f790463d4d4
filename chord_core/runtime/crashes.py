"""What the job manager does when a worker process dies: the policy, as plain functions.

* A task whose worker died while it ran *alone* counts one attempt; after ``MAX_ATTEMPTS``
  such deaths its job fails with an error that names the clip (a poisoned file must not
  crash-loop a worker forever).
* Tasks that died *together* (a describe batch) are not blamed: each is re-queued to run alone,
  so the next death points at the clip that causes it and the innocent ones finish.
* A dead worker is restarted after a back-off that doubles with each death in a row
  (``restart_delay_s``); it is given up only when it cannot even start
  (``MAX_START_FAILURES`` deaths before it reported ready).
* A worker that ends while the manager is shutting down (``ended_at_shutdown``) did not die:
  the stop it was asked for, or the signal that stops the whole process group (exit code -15),
  is logged as the end it is and never restarts it.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from chord_core.errors import WorkerCrashed

if TYPE_CHECKING:
    from chord_core.runtime.scheduling import WorkerSlot

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
MAX_START_FAILURES = 3
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0


def restart_delay_s(deaths_in_row: int) -> float:
    """Seconds to wait before restarting a worker that died ``deaths_in_row`` times without
    finishing a task in between: 0.5, 1, 2, 4 … up to 30."""
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2.0 ** max(0, deaths_in_row - 1))


def poisoned_clip_error(video_path: str, attempts: int, worker_id: str) -> dict[str, str]:
    """The error of a job whose clip took its worker down ``attempts`` times."""
    name = Path(video_path).name or video_path
    return WorkerCrashed(
        f"{name}: the worker process died {attempts} times while analysing this clip (last "
        f"on {worker_id}); it was not tried again",
        hint=f"the file may crash the video decoder or the model: check it with "
             f"`python -m chord_core probe {video_path}`, re-encode it (e.g. ffmpeg -i IN "
             f"-c:v libx264 OUT.mp4) or leave it out; run with -v to see the worker's log "
             f"(killed for lack of memory?)").to_dict()


def start_failure_error(worker_id: str, deaths: int) -> dict[str, str]:
    """The error of a worker given up because it died every time it started."""
    return WorkerCrashed(
        f"worker {worker_id} could not start: its process died {deaths} times while loading "
        f"the model",
        hint="run with -v to see the worker's log; the usual causes are too little memory "
             "for one more copy of the model (use fewer workers: --cpu-workers or --gpus, or "
             "a smaller model) or a broken torch install").to_dict()


def no_worker_error(worker_errors: list[dict[str, str]]) -> dict[str, str]:
    """The error of a job no worker is left to run (every worker was given up): what
    failed (the first worker's own error) and what to do."""
    first = next((e for e in worker_errors if e), None)
    why = f": {first['message']}" if first else ""
    return WorkerCrashed(
        f"no worker is left to run this job: all {len(worker_errors)} worker(s) failed{why}",
        hint=((first or {}).get("hint") or "run with -v to see the workers' log")
        + "; then start the app or the service again (its workers start anew)").to_dict()


# how a worker ended by SIGTERM exits: through Python's exit (lifeline.py), or killed by it
SIGTERM_EXITS = (128 + signal.SIGTERM, -signal.SIGTERM)


def due_restarts(workers: Iterable[WorkerSlot]) -> list[WorkerSlot]:
    """The restarting workers whose back-off is over."""
    now = time.monotonic()
    return [w for w in workers if w.state == "restarting" and now >= w.respawn_at]


def count_death(w: WorkerSlot, starting: bool, exitcode: int | None) -> bool:
    """Count a worker's death on its slot: restart it after the back-off (True), or give it
    up (False, ``w.error`` says why) when it died ``MAX_START_FAILURES`` times starting."""
    from chord_core.runtime.scheduling import WorkerState

    wid = w.spec.worker_id
    w.batch, w.restarts, w.deaths_in_row = [], w.restarts + 1, w.deaths_in_row + 1
    w.start_failures = w.start_failures + 1 if starting else 0
    if w.start_failures >= MAX_START_FAILURES:
        w.state, w.error = WorkerState.FAILED, start_failure_error(wid, w.start_failures)
        log.error("%s", w.error["message"])
        return False
    delay = restart_delay_s(w.deaths_in_row)
    w.state, w.respawn_at = WorkerState.RESTARTING, time.monotonic() + delay
    if exitcode in SIGTERM_EXITS:  # a stop sent to the whole process group (systemd,
        # `docker stop`, `timeout`) reaches the workers before the app hears it: its own
        # shutdown follows within the back-off, and then no restart happens
        log.info("worker %s got SIGTERM; restarting it in %.1f s unless this process is "
                 "stopping too", wid, delay)
    else:
        log.warning("worker %s died (exit code %s); restarting it in %.1f s", wid, exitcode,
                    delay)
    return True


def ended_at_shutdown(w: WorkerSlot, exitcode: int | None) -> None:
    """A worker's end once the manager's shutdown was asked for: stopped, not a death (no
    warning, no restart, no back-off counted)."""
    from chord_core.runtime.scheduling import WorkerState

    w.batch, w.state = [], WorkerState.STOPPED
    log.info("worker %s ended with the shutdown (exit code %s)", w.spec.worker_id, exitcode)
