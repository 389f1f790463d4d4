"""Watch folders and standing checks at their seams: CHORD_WATCH parsing, refused settings,
moments from an entailment curve, the claim of a file (atomic, rename-proof), a folder
outside the media roots."""

from __future__ import annotations

import pytest

from chord_core.errors import ConfigError, InputError
from chord_core.library.alerts import moments
from chord_core.library.background import watches_from_env
from chord_core.library.watch import WatchSettings


def test_chord_watch_names_folders_tasks_queries_and_checks():
    env = {"CHORD_WATCH": "/m/cams; /m/dock|ground|a forklift ;",
           "CHORD_WATCH_CHECKS": "a person climbs the fence;; a forklift enters the walkway",
           "CHORD_WATCH_THRESHOLD": "0.7", "CHORD_WATCH_HOOK": "logger -t chord"}
    cams, dock = watches_from_env("test", env)
    assert (cams.folder, cams.task, cams.query) == ("/m/cams", "describe", "")
    assert (dock.folder, dock.task, dock.query) == ("/m/dock", "ground", "a forklift")
    assert cams.statements == ("a person climbs the fence", "a forklift enters the walkway")
    assert (cams.threshold, cams.hook) == (0.7, "logger -t chord")
    assert watches_from_env("test", {}) == []


@pytest.mark.parametrize("kwargs, words", [
    ({"task": "dance"}, "task is one of"),
    ({"task": "ground"}, "needs --query"),
    ({"settle_s": -1}, "settle time"),
    ({"threshold": 0.0}, "threshold"),
], ids=["bad-task", "ground-without-target", "negative-settle", "zero-threshold"])
def test_bad_watch_settings_are_refused_with_a_hint(kwargs, words):
    with pytest.raises(ConfigError, match=words) as err:
        WatchSettings("/m", **kwargs)
    assert err.value.hint


def test_a_bad_threshold_variable_is_said():
    with pytest.raises(ConfigError, match="not a number"):
        watches_from_env("test", {"CHORD_WATCH": "/m", "CHORD_WATCH_THRESHOLD": "high"})


def _frames(probs):
    return [{"t_s": i * 0.5, "frame_index": i * 5, "entailment": p} for i, p in
            enumerate(probs)]


@pytest.mark.parametrize("probs, spans", [
    ([0.1, 0.9, 0.95, 0.2, 0.85], [(0.5, 1.0, 0.95), (2.0, 2.0, 0.85)]),
    ([0.1, 0.2], []),
    ([0.8, 0.8], [(0.0, 0.5, 0.8)]),
], ids=["two-moments", "none", "at-threshold"])
def test_moments_are_runs_of_frames_over_the_threshold(probs, spans):
    found = moments(_frames(probs), 0.8)
    assert [(m["start_s"], m["end_s"], m["probability"]) for m in found] == spans
    for m in found:
        assert all(m["start_s"] <= e["t_s"] <= m["end_s"] for e in m["evidence"])


def _lease(index, pid: int | None = None, expires_in: float = 30.0) -> str:  # noqa: ANN001
    """An ``owners`` row as the runtime's Lease writes it (this host, ``pid``)."""
    import os
    import socket
    import time
    import uuid

    from chord_core.runtime.leases import process_start

    pid = os.getpid() if pid is None else pid
    owner = f"own-{uuid.uuid4().hex[:8]}"
    now = time.time()
    with index.write() as conn:
        conn.execute("INSERT INTO owners (owner_id, pid, host, proc_start, label, started_at, "
                     "heartbeat_at, expires_at) VALUES (?, ?, ?, ?, 'test', ?, ?, ?)",
                     (owner, pid, socket.gethostname(), process_start(pid), now, now,
                      now + expires_in))
    return owner


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_is_taken_once_and_follows_a_rename(tmp_path):
    from chord_core.library.index import LibraryIndex
    from chord_core.library.watch_table import WatchTable

    with LibraryIndex(tmp_path / "chord.sqlite3") as index:
        me, other = _lease(index), _lease(index)
        one, two = WatchTable(index, "w-1", me), WatchTable(index, "w-1", other)
        assert one.claim_many([("k", "/m/a.mp4", 10, 1)]) == [("k", "/m/a.mp4")]
        assert two.claim_many([("k", "/m/b.mp4", 10, 1)]) == []  # same content, renamed,
        assert [r["path"] for r in one.rows()] == ["/m/b.mp4"]  # and its owner is alive
        assert WatchTable(index, "w-2", other).claim_many([("k", "/m/a.mp4", 10, 1)]) == [
            ("k", "/m/a.mp4")]  # another watch
        assert one.known_key("/m/b.mp4", 10, 1) == "k"


@pytest.mark.parametrize("how", ["pid-dead", "lease-released", "never-renewed"])
def test_a_claim_under_a_dead_lease_is_taken_over(tmp_path, how):
    """The claim of a process that died, released its lease, or never renewed it (the
    watcher that ran in a model worker) is taken — by a rescan, and at a start."""
    from chord_core.library.index import LibraryIndex
    from chord_core.library.watch_table import STALE_S, WatchTable

    with LibraryIndex(tmp_path / "chord.sqlite3") as index:
        dead = {"pid-dead": lambda: _lease(index, _dead_pid()),
                "lease-released": lambda: "own-released",
                "never-renewed": lambda: _lease(index, expires_in=-STALE_S - 1)}[how]()
        WatchTable(index, "w", dead).claim_many([("k1", "/m/a.mp4", 1, 1),
                                                 ("k2", "/m/b.mp4", 1, 1)])
        mine = WatchTable(index, "w", _lease(index))
        assert mine.claim_many([("k1", "/m/a.mp4", 1, 1)]) == [("k1", "/m/a.mp4")]
        # at a start: the rest (and its own, a watcher of this process stopped earlier)
        assert sorted(r["key"] for r in mine.take_over_orphans()) == ["k1", "k2"]
        assert {r["owner"] for r in mine.rows()} == {mine.owner}
        live = WatchTable(index, "w", _lease(index))  # a live owner's claims stay its own
        assert live.claim_many([("k1", "/m/a.mp4", 1, 1)]) == []
        assert live.take_over_orphans() == []


def test_a_folder_outside_the_media_roots_is_refused(tmp_path, monkeypatch):
    from chord_core.library.watch import FolderWatcher
    from chord_core.runtime.store import Store

    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(tmp_path / "media"))
    (tmp_path / "media").mkdir()
    with Store(tmp_path / "chord.sqlite3") as store, pytest.raises(InputError,
                                                                   match="media roots"):
        FolderWatcher(None, store, WatchSettings(str(tmp_path)))


