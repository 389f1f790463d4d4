"""Keeping the library index up with the store without stalling a service.

Measured before (issue 40): the first search of an unindexed store of 1M passages indexed
all of it inside the request, 232 s, while ``/health`` slowed to 4.9 s (the indexing held
the interpreter and the database in long stretches). Now a search indexes what is new for
at most INLINE_BUDGET_S (a job that just finished is found by the next search, as before),
and what is left is indexed by one background thread per index in steps of
STEP_RESULTS results with a pause of STEP_PAUSE_S between them; the search answers at once
from what is indexed and says so (``index.complete`` false, with a note), until the thread
has caught up.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

log = logging.getLogger(__name__)

INLINE_BUDGET_S = 0.25
STEP_PAUSE_S = 0.05
STEP_RESULTS = 50  # results per step (≈ 500 passages): a step holds the interpreter briefly


def catch_up(index: LibraryIndex) -> bool:
    """Index what the store saved since the last sync, here for at most INLINE_BUDGET_S;
    True when the index is complete, else False (the rest is being indexed behind)."""
    if not index.sync_lock.acquire(blocking=False):
        return False  # the background thread holds it: it is catching up
    try:
        deadline = time.monotonic() + INLINE_BUDGET_S
        _, more = index.sync_step(STEP_RESULTS)  # one step at least, then while time is left
        while more and time.monotonic() < deadline:
            _, more = index.sync_step(STEP_RESULTS)
        if not more:
            index.sync()  # nothing is left: only the chapters runs, when they are due
            return True
    finally:
        index.sync_lock.release()
    _start(index)
    return False


def _start(index: LibraryIndex) -> None:
    if index.catch_up_thread is not None and index.catch_up_thread.is_alive():
        return
    thread = threading.Thread(target=_behind, args=(index,), name="chord-index-catch-up",
                              daemon=True)
    index.catch_up_thread = thread
    thread.start()


def _behind(index: LibraryIndex) -> None:
    started, added, more = time.monotonic(), 0, True
    try:
        while more:
            with index.sync_lock:
                step, more = index.sync_step(STEP_RESULTS)
            added += step
            time.sleep(STEP_PAUSE_S)  # others' requests run between the steps
    except Exception:  # noqa: BLE001 — a damaged store: the next search tries again
        log.exception("indexing the library in the background stopped")
        return
    log.info("the library index caught up: %d passages in %.1f s", added,
             time.monotonic() - started)


def behind_note(complete: bool) -> dict[str, Any]:
    """What a search answer says about the index."""
    if complete:
        return {"complete": True}
    return {"complete": False,
            "note": "the library is still being indexed in the background: results saved "
                    "recently may be missing from these hits; search again in a moment"}
