"""Streamlit's "missing ScriptRunContext" warning is kept out of the logs of the workers the
app starts (issue 39: about 35 of them each time a worker started), and only there."""

from __future__ import annotations

import logging
import runpy
import threading
from pathlib import Path
from typing import Iterator

import pytest
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from chord_ui.quiet_logs import LOGGER, WorkerContextFilter

APP = Path(__file__).resolve().parents[2] / "app.py"


@pytest.fixture()
def streamlit_logger(caplog: pytest.LogCaptureFixture) -> Iterator[logging.Logger]:
    """Streamlit's context logger, captured; the filter a test puts on it is taken off."""
    logger = logging.getLogger(LOGGER)
    before = list(logger.filters)
    # each test starts with none of the app's filters (an app test earlier in the run may
    # have put one there, and a worker-process test widens the one it finds in place)
    logger.filters[:] = [f for f in before if not isinstance(f, WorkerContextFilter)]
    caplog.set_level(logging.WARNING, logger=LOGGER)
    # once Streamlit has set its logging up (an app test earlier in the run), its loggers
    # no longer propagate to the root, where caplog listens: listen on this one too
    logger.addHandler(caplog.handler)
    yield logger
    logger.removeHandler(caplog.handler)
    logger.filters[:] = before


def _bare_call(thread_name: str) -> None:
    """What a Streamlit call does outside a session, in a thread of that name."""
    thread = threading.Thread(target=get_script_run_ctx, name=thread_name)
    thread.start()
    thread.join()


def _warned(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {r.threadName for r in caplog.records if "missing ScriptRunContext" in r.getMessage()}


def test_a_worker_process_is_quiet(streamlit_logger: logging.Logger,
                                   caplog: pytest.LogCaptureFixture) -> None:
    """A spawned worker runs app.py as ``__mp_main__``: from then on no thread of it warns;
    Streamlit's other warnings still show."""
    runpy.run_path(str(APP), run_name="__mp_main__")
    assert any(isinstance(f, WorkerContextFilter) for f in streamlit_logger.filters)
    for name in ("MainThread-like", "chord-cpu0"):
        _bare_call(name)
    streamlit_logger.warning("something else")
    assert _warned(caplog) == set()
    assert "something else" in caplog.text


@pytest.mark.parametrize(("thread_name", "shown"), [
    ("chord-dispatch", False),   # the job manager's dispatcher
    ("chord-cpu0", False),       # an in-process worker (ThreadExecutor)
    ("ScriptRunner.scriptThread", True),  # the app's own code: still worth seeing
], ids=["dispatcher", "thread-worker", "app-thread"])
def test_the_app_process_quiets_only_its_workers(streamlit_logger: logging.Logger,
                                                 caplog: pytest.LogCaptureFixture,
                                                 thread_name: str, shown: bool) -> None:
    from chord_ui.quiet_logs import quiet_worker_warnings

    quiet_worker_warnings(worker_process=False)  # as resources.cluster() does
    _bare_call(thread_name)
    assert _warned(caplog) == ({thread_name} if shown else set())


def test_without_the_filter_streamlit_warns(streamlit_logger: logging.Logger,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The warning the filter is for is the one Streamlit gives (guards the tests above)."""
    _bare_call("chord-cpu0")
    assert _warned(caplog) == {"chord-cpu0"}
