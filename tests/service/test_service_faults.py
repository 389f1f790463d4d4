"""Faults with real processes: ``serve`` killed mid-job (kill -9, SIGTERM) and restarted on
the same data dir; an in-process manager (what the app runs) started beside a busy
``serve`` on the same store. What ran is counted from the store's rows (``attempts``
counts each start of a job, ``results`` holds one row per stored result), not from the
code under test's say-so. Each test prints its figures (``FAULTS …``) for
docs/reliability.md."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest
from service_server import Server, start_server, stop_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # two service starts each
STARTUP_S = 420.0  # a worker's start took 107 s on 2 shared cores; leave room


def call(server: Server, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for(what: Callable[[], Any], timeout: float = 180.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"not true after {timeout} s: {what}")


def rows(data: Path) -> dict[str, dict[str, Any]]:
    """The store's job rows (read with plain sqlite3, beside the service)."""
    with sqlite3.connect(data / "chord.sqlite3", timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        out = {r["job_id"]: dict(r) for r in conn.execute("SELECT * FROM jobs")}
        for r in conn.execute("SELECT job_id, COUNT(*) AS n FROM results GROUP BY job_id"):
            out[r["job_id"]]["results"] = r["n"]
    return out


def submit_ground(server: Server, clip: Path, frames_fps: float = 4.0) -> str:
    status, body = call(server, "POST", "/v1/jobs", {
        "task": "ground", "video_path": str(clip), "target": "the moving square",
        "fps": frames_fps, "max_new_tokens": 24})
    assert status == 202, body
    return body["job_id"]


def running_with_progress(server: Server, job_id: str) -> bool:
    _, view = call(server, "GET", f"/v1/jobs/{job_id}")
    return view["state"] == "running" and bool(view["progress"])


@pytest.fixture()
def clip(tmp_path: Path) -> Path:
    from chord_core.testing.videos import make_video

    media = tmp_path / "media"
    media.mkdir(parents=True, exist_ok=True)
    return make_video(media / "long.mp4", duration_s=8.0, fps=8.0, size_wh=(96, 64)).path


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_serve_killed_mid_job_resumes_it_and_the_old_id_gets_the_result(
        tmp_path: Path, tiny_model_dir: Path, clip: Path, sig: signal.Signals) -> None:
    srv = start_server(tmp_path, "--cpu-workers", "1", timeout=STARTUP_S)
    try:
        ids = [submit_ground(srv, clip), submit_ground(srv, clip, 3.0)]  # one runs, one waits
        wait_for(lambda: running_with_progress(srv, ids[0]))
        first_owner = rows(srv.data)[ids[0]]["owner"]
        srv.proc.send_signal(sig)
        srv.proc.wait(60)
    finally:
        if srv.proc.poll() is None:
            stop_server(srv)
    before = rows(srv.data)
    left = [j for j in ids if before[j]["state"] != "done"]
    assert left, before  # something was left for the restart to resume
    expected = "running" if sig == signal.SIGKILL else "queued"  # SIGTERM: put back
    assert all(before[j]["state"] in (expected, "queued") for j in left), before
    srv2 = start_server(tmp_path, "--cpu-workers", "1", timeout=STARTUP_S)
    try:
        for job_id in ids:  # the client polls the old ids on the restarted service
            wait_for(lambda: call(srv2, "GET", f"/v1/jobs/{job_id}")[1]["state"] == "done")
            status, doc = call(srv2, "GET", f"/v1/jobs/{job_id}/result")
            assert status == 200 and doc["schema"] == "chord.result/v1", doc
        after = rows(srv2.data)
    finally:
        stop_server(srv2)
    assert sorted(after) == sorted(ids)  # no new rows: the same jobs, resumed
    for job_id in ids:
        row = after[job_id]
        assert (row["state"], row["results"]) == ("done", 1), row  # finished exactly once
        # a job cut short ran again from its start, once: one more start than before
        starts = before[job_id]["attempts"] + 1 if job_id in left else 1
        assert row["attempts"] == starts, (job_id, row, before[job_id])
    assert all(after[j]["owner"] != first_owner for j in left)  # the new lease took them
    print(f"\nFAULTS serve {sig.name}: 1 fault, {len(left)} job(s) resumed, "
          f"duplicates 0, lost 0")


def test_a_manager_started_beside_a_busy_serve_leaves_its_jobs_alone(
        tmp_path: Path, tiny_model_dir: Path, clip: Path) -> None:
    """What the app does (a JobManager on the shared store) while ``serve`` runs jobs: it
    resumes none of them, writes none of their rows, and runs only its own."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import ModelConfig
    from chord_core.runtime.executors import ThreadExecutor
    from chord_core.runtime.jobs import JobSpec, JobState
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.store import Store
    from chord_core.runtime.workers import cpu_specs

    srv = start_server(tmp_path, "--cpu-workers", "1", timeout=STARTUP_S)
    spy = None
    try:
        theirs = [submit_ground(srv, clip, fps) for fps in (2.0, 1.0, 1.0)]
        wait_for(lambda: running_with_progress(srv, theirs[0]))
        before = rows(srv.data)
        spy = WriteSpy(Store(srv.data / "chord.sqlite3"))
        app = JobManager(cpu_specs(1, ModelConfig(model="test"), threads=1), store=spy,
                         executor=ThreadExecutor())
        try:
            app.wait_ready(120)
            mine = [app.submit(JobSpec(AnalysisRequest(str(clip), "describe",
                                                       max_new_tokens=8)))]
            assert mine[0].result(120).state is JobState.DONE
            for job_id in theirs:
                wait_for(lambda: call(srv, "GET", f"/v1/jobs/{job_id}")[1]["state"] == "done",
                         timeout=300)
        finally:
            app.shutdown()
        after = rows(srv.data)
    finally:
        stop_server(srv)
        if spy is not None:
            spy.inner.close()
    touched = spy.job_ids & set(theirs)
    assert not touched, touched  # 0 rows of the service's written by the other process
    assert spy.job_ids == set(mine)
    for job_id in theirs:
        row = after[job_id]
        assert (row["state"], row["results"], row["attempts"]) == ("done", 1, 1), row
        assert row["owner"] == before[job_id]["owner"]
        if before[job_id]["started_at"] is not None:  # not re-queued: same start
            assert row["started_at"] == before[job_id]["started_at"]
    assert after[mine[0]]["owner"] not in {before[j]["owner"] for j in theirs}
    log = srv.log.read_text()
    assert "cannot go from" not in log and "Traceback" not in log, log[-3000:]
    print(f"\nFAULTS app beside serve: {len(theirs)} service job(s), {len(mine)} app job(s),"
          f" run twice 0, rows changed by the other process 0")


class WriteSpy:
    """The real store, recording the job ids each write names (a spy at the boundary)."""

    WRITES = ("add_job", "update_state", "save_result", "delete_job")

    def __init__(self, inner: Any) -> None:
        self.inner, self.job_ids = inner, set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.WRITES:
            return attr

        def write(job_id: str, *args: Any, **kwargs: Any) -> Any:
            self.job_ids.add(str(job_id))
            return attr(job_id, *args, **kwargs)
        return write


@pytest.fixture()
def small_disk(tmp_path: Path) -> Path:
    """A 4 MiB tmpfs as the service's data dir (a real file system that fills up)."""
    import subprocess

    data = tmp_path / "data"
    data.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs",
                          str(data)], capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {got.stderr.strip()}")
    yield data
    subprocess.run(["umount", "-l", str(data)], capture_output=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk refuses (ENOSPC); returns it (delete it to free)."""
    filler = disk / "filler"
    block = b"\0" * 65536
    with filler.open("wb") as fh:
        try:
            while True:
                fh.write(block)
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_at_finish_loses_nothing(tmp_path: Path, tiny_model_dir: Path,
                                            clip: Path, small_disk: Path) -> None:
    """The disk fills while a job runs: it finishes ``done`` with ``pending_write`` (its
    result served from memory, the row still ``running``), and is stored once space
    returns. Filled again and killed -9 before space returns: the restart runs it again,
    once."""
    srv = start_server(tmp_path, "--cpu-workers", "1", timeout=STARTUP_S)
    try:
        first = submit_ground(srv, clip, 2.0)
        wait_for(lambda: running_with_progress(srv, first))
        filler = fill(small_disk)
        view = wait_for(lambda: (v := call(srv, "GET", f"/v1/jobs/{first}")[1])["state"]
                        == "done" and v)
        assert view["pending_write"] is True, view
        assert rows(srv.data)[first]["state"] == "running"  # the store could not be told
        assert call(srv, "GET", f"/v1/jobs/{first}/result")[0] == 200  # from memory
        filler.unlink()  # space returns
        wait_for(lambda: rows(srv.data)[first].get("results") == 1, timeout=30)
        assert rows(srv.data)[first]["state"] == "done"
        assert call(srv, "GET", f"/v1/jobs/{first}")[1]["pending_write"] is False
        second = submit_ground(srv, clip, 2.0)
        wait_for(lambda: running_with_progress(srv, second))
        filler = fill(small_disk)
        wait_for(lambda: call(srv, "GET", f"/v1/jobs/{second}")[1]["pending_write"])
        srv.proc.kill()  # dies before space returns: the result was only in memory
        srv.proc.wait(30)
    finally:
        if srv.proc.poll() is None:
            stop_server(srv)
    assert rows(srv.data)[second]["state"] == "running"
    filler.unlink()
    srv2 = start_server(tmp_path, "--cpu-workers", "1", timeout=STARTUP_S)
    try:
        wait_for(lambda: call(srv2, "GET", f"/v1/jobs/{second}")[1]["state"] == "done")
        after = rows(srv2.data)
    finally:
        stop_server(srv2)
    assert (after[first]["state"], after[first]["results"], after[first]["attempts"]) == \
        ("done", 1, 1)
    assert (after[second]["state"], after[second]["results"], after[second]["attempts"]) \
        == ("done", 1, 2)  # run again once, stored once
    print("\nFAULTS full disk: 2 faults (space back; killed while full), duplicates 0, "
          "lost 0")
