"""Faults that used to lose or repeat work, on real processes (CPU workers, tiny model).

* A ``batch`` run whose worker is killed (-9), that is then stopped by SIGTERM, re-run and
  killed (-9), and re-run to the end: every clip is done exactly once (one job and one result
  per clip in the store, one result file each), the batch is one parent row (taken up by
  each run, done at the end with its progress) whose children are the clips' jobs, and no
  process of a killed run survives it.
* A poisoned clip (``CHORD_FAULT_CRASH_ON``) that kills its worker fails after MAX_ATTEMPTS
  with an error naming it; the clips batched with it finish; the workers stay up. A full
  store (SQLite's SQLITE_FULL, the fake at the boundary) never stops the dispatcher.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.runtime.crashes import MAX_ATTEMPTS
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.runtime.manager import JobManager
from chord_core.runtime.store import Store
from chord_core.runtime.workers import cpu_specs
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
N_CLIPS = 6
POISON = "crash-me-7f3"  # CHORD_FAULT_CRASH_ON matches the whole path: keep it unique


def _states(db: Path, parents: bool = False) -> dict[str, int]:
    """Clip jobs (a batch's children) per state — or, ``parents``, the batches' rows —
    read from the store file by a separate read-only connection."""
    if not db.exists():
        return {}
    which = "IS NULL" if parents else "IS NOT NULL"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT state, COUNT(*) FROM jobs "
                                     f"WHERE parent {which} GROUP BY state"))
    except sqlite3.Error:
        return {}


def _wait_for(what, timeout: float = 300.0, every: float = 0.03):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def _workers(proc: psutil.Process) -> list[psutil.Process]:
    return [c for c in proc.children(recursive=True)
            if "spawn_main" in " ".join(c.cmdline())]


def _assert_no_survivors(family: list[psutil.Process]) -> None:
    """Every process of a stopped run (workers, resource tracker) is gone within seconds."""
    _, alive = psutil.wait_procs(family, timeout=8)
    assert not alive, [(p.pid, p.cmdline()) for p in alive]


class BatchRun:
    """One ``python -m chord_core batch`` process, with its process family tracked."""

    def __init__(self, args: list[str], env: dict, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "chord_core", "batch", *args],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=log.open("w"))
        self.ps = psutil.Process(self.proc.pid)
        self.family: set[psutil.Process] = set()

    def watch(self) -> list[psutil.Process]:
        """Record the run's descendants as they appear (a dead run's orphans can't be found)."""
        try:
            self.family.update(self.ps.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        return _workers(self.ps) if self.proc.poll() is None else []

    def stop(self, sig: int) -> int:
        self.watch()
        self.proc.send_signal(sig)
        rc = self.proc.wait(60)
        _assert_no_survivors(list(self.family))
        return rc

    @property
    def stderr(self) -> str:
        return self.log.read_text()


@pytest.fixture
def batch_setup(tmp_path, tiny_model_dir):
    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(N_CLIPS):
        make_video(clips / f"c{i}.mp4", duration_s=2.0, fps=10.0, size_wh=(64, 48), seed=i)
    env = {**os.environ, "CHORD_DATA_DIR": str(tmp_path / "data")}
    args = [str(clips), "--task", "ground", "--query", "the square", "--fps", "6",
            "--cpu-workers", "2", "--model", "test", "--out", str(tmp_path / "out"), "-q"]
    return args, env, tmp_path / "data" / "chord.sqlite3", tmp_path


def test_killed_and_stopped_batches_do_every_clip_exactly_once(batch_setup):
    args, env, db, tmp = batch_setup
    # run 1: a worker is killed -9 mid-run, then the batch is stopped with SIGTERM
    run = BatchRun(args, env, tmp / "run1.log")
    victim = _wait_for(lambda: _states(db).get("running") and run.watch())[0]
    victim.kill()
    _wait_for(lambda: _states(db).get("done", 0) >= 1 and run.watch() is not None)
    assert run.stop(signal.SIGTERM) == 143, run.stderr
    assert "error: stopped by SIGTERM" in run.stderr and "Traceback" not in run.stderr
    after1 = _states(db)
    assert set(after1) <= {"queued", "done"} and after1.get("queued"), after1  # none "running"
    assert _states(db, parents=True) == {"cancelled": 1}  # stopped: History says so
    # run 2: killed -9 once one more clip is done; its workers die with it
    run = BatchRun(args, env, tmp / "run2.log")
    _wait_for(lambda: run.watch() and _states(db).get("done", 0) > after1["done"])
    assert run.stop(signal.SIGKILL) == -signal.SIGKILL
    after2 = _states(db)
    assert after2.get("done", 0) < N_CLIPS, after2  # work was left for run 3
    assert _states(db, parents=True) == {"running": 1}  # killed: taken up by the next run
    # run 3: to the end
    run = BatchRun(args, env, tmp / "run3.log")
    assert run.proc.wait(300) == 0, run.stderr
    summary = json.loads((tmp / "out" / "summary.json").read_text())
    assert summary["counts"].get("skipped", 0) == after2["done"]
    assert sum(summary["counts"].values()) == N_CLIPS
    with sqlite3.connect(db) as conn:
        per_key = conn.execute("SELECT key, COUNT(*), MIN(state), MIN(parent), MAX(parent) "
                               "FROM jobs WHERE parent IS NOT NULL GROUP BY key").fetchall()
        results = conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        top = conn.execute("SELECT job_id, state, attempts, summary_json FROM jobs "
                           "WHERE parent IS NULL").fetchall()
    # one parent row (the batch, History's one row), taken up by each of the three runs
    assert len(top) == 1 and top[0][0] == summary["batch_id"], top
    assert top[0][1:3] == ("done", 3), top
    progress = json.loads(top[0][3])["progress"]
    assert progress == {"stage": "clips", "done": N_CLIPS, "total": N_CLIPS}
    # each clip: one child job of that parent, done once, one result
    assert len(per_key) == N_CLIPS, per_key
    assert all(n == 1 and st == "done" and lo == hi == summary["batch_id"]
               for _, n, st, lo, hi in per_key), per_key
    assert results == N_CLIPS
    files = sorted(p.name for p in (tmp / "out").glob("c*.ground.json"))
    assert files == [f"c{i}.ground.json" for i in range(N_CLIPS)]
    _assert_no_survivors(list(run.family))


def test_poisoned_clip_fails_alone_and_a_full_store_does_not_stop_jobs(tmp_path, tiny_model_dir,
                                                                       monkeypatch):
    clips = [make_video(tmp_path / f"{name}.mp4", duration_s=1.0, fps=8.0, size_wh=(64, 48),
                        seed=i).path for i, name in enumerate(["a", POISON, "b", "c"])]
    monkeypatch.setenv("CHORD_FAULT_CRASH_ON", POISON)
    store = Store(tmp_path / "chord.sqlite3")
    m = JobManager(cpu_specs(2, ModelConfig(model="test", batch_size=4), threads=1),
                   store=store)
    try:
        m.wait_ready(180)
        with m._lock:  # one burst: the poisoned clip goes into a describe batch with others
            ids = [m.submit(JobSpec(AnalysisRequest(str(c), "describe", max_new_tokens=128)))
                   for c in clips]
        finals = {Path(c).stem: m.wait(i, 300) for c, i in zip(clips, ids)}
        bad = finals.pop(POISON)
        assert bad.state is JobState.FAILED and bad.error["type"] == "WorkerCrashed"
        assert bad.error["message"].startswith(f"{POISON}.mp4: ")
        assert f"died {MAX_ATTEMPTS} times" in bad.error["message"] and bad.error["hint"]
        assert all(f.state is JobState.DONE for f in finals.values()), finals  # innocents
        assert store.get_job(ids[1])["state"] == "failed"
        rows = m.workers()
        assert MAX_ATTEMPTS <= sum(r["restarts"] for r in rows) <= MAX_ATTEMPTS + 1
        _wait_for(lambda: all(w["state"] == "ready" for w in m.workers()), 300)
        # the disk under the store fills up: jobs still run, the problem is said clearly
        conn = store._connection()
        conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
        spec = JobSpec(AnalysisRequest(str(clips[0]), "describe", max_new_tokens=128), key="k")
        big = JobSpec(spec.request, label="x" * 20000, key="k2")
        done = [m.wait(m.submit(s), 300) for s in (big, spec)]
        assert [d.state for d in done] == [JobState.DONE, JobState.DONE]
        problem = m.store_problem()
        assert problem["type"] == "StoreError" and "full" in problem["message"]
        assert "free space" in problem["hint"]
        assert m._thread.is_alive()  # the dispatcher survived
    finally:
        m.shutdown()
        store.close()
