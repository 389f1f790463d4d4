"""How many finished jobs the manager keeps in memory.

A service or a long batch finishes jobs for days; each kept ``JobStatus`` holds its whole
``Result``. Once a finished job is in the store, memory need not hold it: past
``KEEP_FINISHED`` finished jobs (``manager.keep_finished`` overrides it) the oldest are let
go, and ``JobTable.status`` reads them back from the store when asked (``stored_status``).
Nothing is let go without a store, after a store write failed, or while any of its tasks
is still out with a worker (a cancelled job whose worker has not answered yet).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

KEEP_FINISHED = 1000


def evict_finished(table: Any, tasks: dict[str, Any], link: Any) -> int:
    """Let go of the oldest finished jobs beyond the table's bound (and their tasks);
    returns how many. Call under the table's lock, when every earlier write has been made
    (``link.problem`` then says whether they all went through)."""
    keep = int(getattr(table, "keep_finished", KEEP_FINISHED))
    jobs: dict[str, Any] = table._jobs
    if len(jobs) <= keep or link.store is None or link.problem is not None:
        return 0
    done = [job for job in jobs.values()
            if job.status.state.finished and not getattr(job.status, "settling", False)
            and all(tasks[t].state.is_finished for t in job.tasks if t in tasks)]
    extra = len(done) - keep
    if extra <= 0:
        return 0
    done.sort(key=lambda job: job.status.finished_at or 0.0)
    for job in done[:extra]:
        for tid in job.tasks:
            tasks.pop(tid, None)
        del jobs[job.status.job_id]
    table._archive = link.store
    log.debug("let go of %d finished job(s) kept in the store", extra)
    return extra
