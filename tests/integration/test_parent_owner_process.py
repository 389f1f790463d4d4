"""A parent row another live *process* drives is not taken over, and is taken up once that
process is killed (issue 40: "the same ``chapters`` command started twice at once runs 29 of
33 chunks twice": the second process took over rows the live one owned). Two real processes
on one SQLite store: a holder that leases the run and opens its parent, and this test's own
``ParentJobs`` (the real CLI's two-process run is ``test_long_run_twice.py``, slow). Unlike
``tests/unit/test_parent_owner.py`` (two leases in one process), the owner here is a live pid
of another process, and then a dead one (``kill -9``: no clean release)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.errors import AlreadyRunning
from chord_core.runtime.leases import Lease
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store

ROOT = Path(__file__).resolve().parents[2]
RUN = "lvc-0123456789ab"
HOLDER = """
import sys, time
from chord_core.runtime.leases import Lease
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store

store = Store(sys.argv[1])
lease = Lease(store, label="chapters long.mp4")
lease.acquire()
row = ParentJobs(store, lease.owner_id).open(
    sys.argv[2], kind="chapters", video_path="/clips/long.mp4", model="test", label="long.mp4")
print(row["owner"], flush=True)
time.sleep(120)
"""


def _open(parents: ParentJobs) -> dict:
    return parents.open(RUN, kind="chapters", video_path="/clips/long.mp4", model="test",
                        label="long.mp4")


def test_a_parent_another_live_process_drives_is_refused_then_taken_up_once_it_dies(
        tmp_path: Path) -> None:
    db = tmp_path / "chord.sqlite3"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), RUN], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        theirs = holder.stdout.readline().strip()
        assert theirs, holder.stderr.read()
        with Store(db) as store:
            mine = Lease(store)
            mine.acquire()
            with pytest.raises(AlreadyRunning) as err:
                _open(ParentJobs(store, mine.owner_id))
            assert "already going in another process" in err.value.message
            assert "chapters long.mp4" in err.value.message and "wait for it" in err.value.hint
            row = store.get_job(RUN)
            assert row["owner"] == theirs and row["attempts"] == 1  # untouched
            os.kill(holder.pid, signal.SIGKILL)  # gone without a word: its lease stays
            holder.wait(10)
            row = _open(ParentJobs(store, mine.owner_id))
            assert row["owner"] == mine.owner_id and row["state"] == "running"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
