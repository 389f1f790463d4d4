"""One owner per job: leases in the store, claiming orphans atomically, refusing writes to
another owner's rows (``runtime/leases.py``), and the full-disk retry of ``StoreLink``."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from chord_core.runtime.leases import RESUME_LIMIT, Lease, owner_gone, process_start
from chord_core.runtime.store import NotOwner, Store
from chord_core.runtime.store_link import StoreLink
from chord_core.errors import exit_code_for
from chord_core.service.http_errors import from_job_error

REPO = Path(__file__).resolve().parents[2]


def add(store: Store, job_id: str, owner: str | None, state: str = "queued") -> None:
    store.add_job(job_id, video_path=f"/clips/{job_id}.mp4", task="describe", owner=owner)
    if state != "queued":
        store.update_state(job_id, "running", owner=owner)
        if state != "running":
            store.update_state(job_id, state, owner=owner)


def test_a_crashed_owners_jobs_are_claimed_once_with_their_attempts(tmp_path: Path) -> None:
    """A process takes a lease, adds jobs, runs two, and dies (os._exit): the next start
    claims its queued and running jobs, not its finished ones, and a second claim none."""
    db = tmp_path / "chord.sqlite3"
    script = textwrap.dedent(f"""
        import os
        from chord_core.runtime.leases import Lease
        from chord_core.runtime.store import Store
        s = Store({str(db)!r})
        lease = Lease(s)
        lease.acquire()
        for j in ("r1", "r2", "q1", "d1"):
            s.add_job(j, video_path=j + ".mp4", task="describe", owner=lease.owner_id)
        for j in ("r1", "r2", "d1"):
            s.update_state(j, "running", worker="gpu0", owner=lease.owner_id)
        s.update_state("d1", "failed", error={{"message": "x"}}, owner=lease.owner_id)
        os._exit(3)  # no close, no release: a crash
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 3, proc.stderr
    with Store(db) as s:
        lease = Lease(s)
        lease.acquire()
        assert lease.claim_orphans() == ["r1", "r2", "q1"]
        r1 = s.get_job("r1")
        assert (r1["state"], r1["worker"], r1["started_at"], r1["attempts"], r1["owner"]) == \
            ("queued", None, None, 1, lease.owner_id)
        assert s.get_job("d1")["state"] == "failed"
        assert lease.claim_orphans() == []  # they are a live owner's now
        owners = [r[0] for r in s._read("SELECT owner_id FROM owners")]
        assert owners == [lease.owner_id]  # the dead owner's row is gone


def test_a_live_process_keeps_its_jobs_until_it_dies(tmp_path: Path) -> None:
    db = tmp_path / "chord.sqlite3"
    script = textwrap.dedent(f"""
        import sys
        from chord_core.runtime.leases import Lease
        from chord_core.runtime.store import Store
        s = Store({str(db)!r})
        lease = Lease(s)
        lease.acquire()
        s.add_job("theirs", video_path="a.mp4", task="describe", owner=lease.owner_id)
        s.update_state("theirs", "running", owner=lease.owner_id)
        print("ready", flush=True)
        sys.stdin.readline()  # alive until told
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout.readline().strip() == "ready"
        with Store(db) as s:
            mine = Lease(s)
            mine.acquire()
            assert mine.claim_orphans() == []
            with pytest.raises(NotOwner, match="belongs to own-"):
                s.update_state("theirs", "cancelled", owner=mine.owner_id)
            row = s.get_job("theirs")
            assert (row["state"], row["attempts"]) == ("running", 1)  # not changed
            proc.kill()
            proc.wait(10)
            assert mine.claim_orphans() == ["theirs"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("host, pid, start, expires_in, gone", [
    ("here", "mine", "mine", 60.0, False),
    ("here", "mine", "another", 60.0, True),   # pid reused (a restarted container's pid 1)
    ("here", "dead", "", 60.0, True),
    ("elsewhere", "dead", "", 60.0, False),    # another host: only the expiry counts
    ("elsewhere", "dead", "", -1.0, True),
], ids=["this-process", "pid-reused", "pid-dead", "other-host-fresh", "other-host-expired"])
def test_when_an_owner_is_gone(host: str, pid: str, start: str, expires_in: float,
                               gone: bool) -> None:
    me = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(30)
    row = {"host": me if host == "here" else "elsewhere.example",
           "pid": os.getpid() if pid == "mine" else dead.pid,
           "proc_start": process_start(os.getpid()) if start == "mine" else
           ("1" if start == "another" else ""),
           "expires_at": time.time() + expires_in}
    assert owner_gone(row, time.time(), me) is gone


def test_a_released_lease_leaves_its_jobs_to_the_next_start(tmp_path: Path) -> None:
    with Store(tmp_path / "chord.sqlite3") as s:
        first = Lease(s)
        first.acquire()
        add(s, "q1", first.owner_id)
        add(s, "done1", first.owner_id, "cancelled")
        second = Lease(s)
        second.acquire()
        assert second.claim_orphans() == []  # same process, live lease
        first.release()
        assert second.claim_orphans() == ["q1"]


def test_jobs_of_an_older_chord_without_owner_are_orphans(tmp_path: Path) -> None:
    with Store(tmp_path / "chord.sqlite3") as s:
        add(s, "old", None, "running")
        lease = Lease(s)
        lease.acquire()
        assert lease.claim_orphans() == ["old"]


def test_a_job_whose_owner_died_too_often_fails_with_a_reason(tmp_path: Path) -> None:
    with Store(tmp_path / "chord.sqlite3") as s:
        add(s, "poison", None, "running")
        with s.transaction() as conn:
            conn.execute("UPDATE jobs SET attempts = ? WHERE job_id = 'poison'",
                         (RESUME_LIMIT,))
        lease = Lease(s)
        lease.acquire()
        assert lease.claim_orphans() == []
        row = s.get_job("poison")
        assert row["state"] == "failed" and row["error"]["type"] == "ResumeError"
        assert f"died {RESUME_LIMIT} times" in row["error"]["message"]
        assert row["error"]["hint"]  # what to do: a ResumeError of chord_core.errors
        api = from_job_error(row["error"])  # a client polling it: 503 with the reason, no 500
        assert (api.status, api.message) == (503, row["error"]["message"])
        assert exit_code_for(row["error"]) == 1


def test_two_processes_claiming_at_once_never_share_a_job(tmp_path: Path) -> None:
    """Two leases (own connections) claim 40 orphans at the same moment: each job is
    claimed exactly once (BEGIN IMMEDIATE + conditional UPDATE)."""
    db = tmp_path / "chord.sqlite3"
    with Store(db) as s:
        for i in range(40):
            add(s, f"j{i:02d}", "own-dead" if i % 2 else None, "running" if i % 3 else "queued")
    stores = [Store(db), Store(db)]
    leases = [Lease(st) for st in stores]
    got: dict[int, list[str]] = {}
    barrier = threading.Barrier(2)

    def claim(i: int) -> None:
        leases[i].acquire()
        barrier.wait()
        got[i] = leases[i].claim_orphans()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for st in stores:
        st.close()
    assert not set(got[0]) & set(got[1])
    assert sorted(got[0] + got[1]) == [f"j{i:02d}" for i in range(40)]


def test_a_lapsed_lease_is_taken_again_on_renew(tmp_path: Path) -> None:
    with Store(tmp_path / "chord.sqlite3") as s:
        lease = Lease(s)
        lease.acquire()
        assert lease.renew() is True
        with s.transaction() as conn:  # another host took it for dead and dropped it
            conn.execute("DELETE FROM owners")
        assert lease.renew() is False
        assert [r[0] for r in s._read("SELECT owner_id FROM owners")] == [lease.owner_id]


def test_an_older_store_gets_the_owner_column(tmp_path: Path) -> None:
    db = tmp_path / "chord.sqlite3"
    Store(db).close()
    with sqlite3.connect(db) as raw:  # what an older Chord made: jobs without owner
        raw.execute("DROP INDEX IF EXISTS jobs_owner_state")
        raw.execute("ALTER TABLE jobs DROP COLUMN owner")
        raw.execute("INSERT INTO jobs (job_id, state, submitted_at) VALUES ('a', 'queued', 1)")
    with Store(db) as s:
        assert s.get_job("a")["owner"] is None
        lease = Lease(s)
        lease.acquire()
        assert lease.claim_orphans() == ["a"]


def test_writes_a_full_disk_refused_are_made_in_order_when_space_returns(tmp_path: Path
                                                                          ) -> None:
    """StoreLink keeps refused writes and those after them, in order, and makes them once
    the store takes writes again (here SQLite's page limit stands for the disk)."""
    from tests.unit.test_store import make_result

    s = Store(tmp_path / "chord.sqlite3")
    link = StoreLink(s)
    link.lease.acquire()
    link.add_job("j1", video_path="a.mp4", task="ground")
    conn = s._connection()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    big = make_result("x" * 200_000)
    link.update_state("j1", "running")
    link.save_result("j1", big.to_dict())
    assert link.problem is not None and "full" in link.problem["message"]
    assert link.unwritten_jobs() == {"j1"}
    assert s.get_job("j1")["state"] in ("queued", "running")
    assert link.retry_due(force=True) == []  # still full
    conn.execute("PRAGMA max_page_count = 1073741823")  # space returns
    assert link.retry_due(force=True) == ["j1"]
    assert link.problem is None and not link.unwritten
    assert s.get_job("j1")["state"] == "done"
    assert s.get_result("j1")["query"] == big.query
    s.close()


def test_a_parent_row_is_its_drivers_and_no_other_live_process_claims_it(tmp_path: Path
                                                                          ) -> None:
    """A parent job (a batch, a long run) opened under a lease carries that owner: a second
    process starting beside the live one leaves it alone; once its owner is gone (released
    here, as a stopped process does), the next start claims it like any orphan."""
    from chord_core.runtime.parents import ParentJobs

    with Store(tmp_path / "chord.sqlite3") as s:
        first, second = Lease(s), Lease(s)
        first.acquire()
        ParentJobs(s, first.owner_id).open("batch-1", kind="batch", video_path="/out",
                                           model="test", label="batch of 2 clip(s)")
        row = s.get_job("batch-1")
        assert (row["state"], row["owner"]) == ("running", first.owner_id)
        second.acquire()
        assert second.claim_orphans() == []  # the live driver's: left alone
        assert s.get_job("batch-1")["owner"] == first.owner_id
        first.release()
        assert second.claim_orphans() == ["batch-1"]
        assert s.get_job("batch-1")["owner"] == second.owner_id
