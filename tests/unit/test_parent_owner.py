"""A parent row is driven by one live process (issue 40: "the same ``chapters`` command
started twice at once runs 29 of 33 chunks twice"), and every manager with a store holds its
lease from the start (issue 38: a long-video run printed a false "lease … had lapsed" ERROR
at its first renewal). Real SQLite, real leases; two managers in one test process are two
owners (their leases differ; the pid is alive)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chord_core.config import ModelConfig
from chord_core.errors import AlreadyRunning
from chord_core.runtime.cluster import in_process_manager
from chord_core.runtime.leases import Lease
from chord_core.runtime.parents import ParentJobs
from chord_core.runtime.store import Store

RUN = "lvc-0123456789ab"


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "chord.sqlite3")
    yield s
    s.close()


def _open(parents: ParentJobs) -> dict:
    return parents.open(RUN, kind="chapters", video_path="/clips/long.mp4", model="test",
                        label="long.mp4")


def test_a_parent_a_live_process_drives_is_not_taken_over(store) -> None:
    first, second = Lease(store, label="chapters long.mp4"), Lease(store)
    first.acquire()
    second.acquire()
    assert _open(ParentJobs(store, first.owner_id))["owner"] == first.owner_id
    with pytest.raises(AlreadyRunning) as err:
        _open(ParentJobs(store, second.owner_id))
    assert "already going in another process" in err.value.message
    assert "chapters long.mp4" in err.value.message and "wait for it" in err.value.hint
    row = store.get_job(RUN)
    assert row["owner"] == first.owner_id and row["attempts"] == 1  # untouched
    assert _open(ParentJobs(store, first.owner_id))["owner"] == first.owner_id  # its own


def test_a_parent_whose_owner_is_gone_is_taken_up(store) -> None:
    first, second = Lease(store), Lease(store)
    first.acquire()
    _open(ParentJobs(store, first.owner_id))
    first.release()  # a clean exit (or a dead pid, or an expired lease elsewhere)
    second.acquire()
    row = _open(ParentJobs(store, second.owner_id))
    assert row["owner"] == second.owner_id and row["state"] == "running"


def test_a_manager_that_resumes_nothing_holds_its_lease_from_the_start(store, caplog
                                                                       ) -> None:
    manager = in_process_manager(ModelConfig(model="test"), store=store, resume=False)
    try:
        owner = manager.owner_id
        owners = [r["owner_id"] for r in store.read("SELECT owner_id FROM owners")]
        assert owners == [owner]  # written at start, not at the first renewal
        with caplog.at_level(logging.WARNING, logger="chord_core.runtime.leases"):
            assert manager._link.lease.renew() is True
        assert "lapsed" not in caplog.text
    finally:
        manager.shutdown()


def test_history_delete_goes_through_the_lease(store) -> None:
    """History's delete (``manager.parents.delete``): a finished run goes with its children;
    one still running under a live lease is refused, one whose owner is gone is deleted."""
    live, gone = Lease(store), Lease(store)
    live.acquire()
    gone.acquire()
    for run, lease in (("lvc-live", live), ("lvc-gone", gone)):
        store.add_job(run, video_path="/clips/long.mp4", task="chapters", owner=lease.owner_id)
        store.add_job(f"{run}-c0000", video_path="/clips/long.mp4", task="describe",
                      parent=run, owner=lease.owner_id)
        store.update_state(f"{run}-c0000", "running", owner=lease.owner_id)
    gone.release()
    mine = ParentJobs(store, Lease(store).owner_id)
    with pytest.raises(AlreadyRunning) as err:
        mine.delete("lvc-live")
    assert "cancel it first" in err.value.hint
    assert store.get_job("lvc-live") and store.get_job("lvc-live-c0000")  # all kept
    assert mine.delete("lvc-gone") == 2
    assert store.get_job("lvc-gone") is None and store.get_job("lvc-gone-c0000") is None
    store.update_state("lvc-live-c0000", "failed", owner=live.owner_id)
    store.update_state("lvc-live", "failed", owner=live.owner_id)
    assert mine.delete("lvc-live") == 2
