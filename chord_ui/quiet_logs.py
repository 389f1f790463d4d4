"""Streamlit's "missing ScriptRunContext" warning, kept out of the logs of the workers the app
starts (issue 39).

A model worker is a process spawned from the app: it runs ``app.py`` again as
``__mp_main__`` (doing nothing there, but importing Streamlit), and any Streamlit call made
in it has no session, so Streamlit warns "Thread '…': missing ScriptRunContext! This warning
can be ignored when running in bare mode." — once per call, dozens per start. The same holds
for the app's own worker threads (``chord-*``: the dispatcher, in-process workers). There the
warning says nothing a user can act on, so it is filtered; anywhere else in the app process
it still shows (a page's code run outside its session is a bug worth seeing).
"""

from __future__ import annotations

import logging

LOGGER = "streamlit.runtime.scriptrunner_utils.script_run_context"
MESSAGE = "missing ScriptRunContext"
WORKER_THREADS = ("chord-",)  # threads the job manager starts (manager.py, executors.py)

__all__ = ["LOGGER", "WorkerContextFilter", "quiet_worker_warnings"]


class WorkerContextFilter(logging.Filter):
    """Drops the missing-ScriptRunContext warning: everywhere (in a worker process), or only
    from the job manager's threads (in the app's own process)."""

    def __init__(self, *, everywhere: bool) -> None:
        super().__init__()
        self.everywhere = everywhere

    def filter(self, record: logging.LogRecord) -> bool:
        if MESSAGE not in record.getMessage():
            return True
        return not (self.everywhere or (record.threadName or "").startswith(WORKER_THREADS))


def quiet_worker_warnings(*, worker_process: bool) -> WorkerContextFilter:
    """Put the filter on Streamlit's logger (once per process; the one in place is kept,
    widened to everywhere in a worker process) and return it."""
    logger = logging.getLogger(LOGGER)
    for f in logger.filters:
        if isinstance(f, WorkerContextFilter):
            f.everywhere = f.everywhere or worker_process
            return f
    f = WorkerContextFilter(everywhere=worker_process)
    logger.addFilter(f)
    return f
