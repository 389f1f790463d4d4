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
        # the worker is warm now: a second job as short as the first ran through between
        # two polls once (clean-clone CI, session 13), so it reads 4× the frames
        second = submit_ground(srv, clip, 8.0)
        wait_for(lambda: running_with_progress(srv, second), every=0.05)
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


N_TASKS = 64  # the most one request may hold. The manager starts the first task alone and
# scores the other 63 in one batched pass (each 448×336 image about 190 visual tokens), which
# took about 4 s on 2 shared cores: the kill, as soon as the first is done, lands inside it


def predict_body(tmp: Path) -> dict[str, Any]:
    """N_TASKS image + statement pairs (JPEG, base64), every one a different image."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    rng, tasks = np.random.default_rng(7), []
    for i in range(N_TASKS):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (336, 448, 3), dtype=np.uint8)).save(buf, "JPEG")
        tasks.append({"id": f"t{i}", "text": f"there are {i} birds",
                      "image_data": base64.b64encode(buf.getvalue()).decode()})
    return {"tasks": tasks}


def post_in_thread(server: Server, body: dict[str, Any]) -> Any:
    """POST /batch_predict from a thread (the client waits; the service is killed under it)."""
    import threading

    import requests

    box: dict[str, Any] = {}

    def send() -> None:
        try:
            box["response"] = requests.post(server.url + "/batch_predict", json=body,
                                            timeout=600)
        except requests.RequestException as exc:
            box["error"] = exc
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t, box


def predict_rows(data: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the parents of /batch_predict requests, their children) from the store's rows."""
    all_rows = rows(data)
    parents = {k: r for k, r in all_rows.items() if k.startswith("bp-")}
    kids = {k: r for k, r in all_rows.items() if r["parent"] in parents}
    return parents, kids


def test_batch_predict_after_a_serve_crash_finishes_each_task_once(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """kill -9 of ``serve`` mid-request: the restarted service ends the stored parent by
    itself (its children resumed), and the client's re-sent request gets every answer from
    them — no task is scored twice, none is lost."""
    import requests

    body = predict_body(tmp_path)
    srv = start_server(tmp_path, "--cpu-workers", "1", "--batch-size", "1",
                       timeout=STARTUP_S)
    try:
        t, box = post_in_thread(srv, body)
        wait_for(lambda: any(r["state"] == "done" for r in predict_rows(srv.data)[1].values()),
                 timeout=300, every=0.05)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(60)
        t.join(30)
    finally:
        if srv.proc.poll() is None:
            stop_server(srv)
    assert "error" in box, box  # the client lost its connection
    parents, before = predict_rows(srv.data)
    assert len(parents) == 1 and len(before) == N_TASKS, (parents, len(before))
    left = [k for k, r in before.items() if r["state"] != "done"]
    assert left, "every task finished before the kill: nothing was left to resume"
    (parent_id,) = parents
    srv2 = start_server(tmp_path, "--cpu-workers", "1", "--batch-size", "1",
                        timeout=STARTUP_S)
    try:  # the stored parent ends by itself, without the client
        wait_for(lambda: rows(srv2.data)[parent_id]["state"] == "done", timeout=300)
        r = requests.post(srv2.url + "/batch_predict", json=body, timeout=300)
        assert r.status_code == 200, r.text
        preds = r.json()["predictions"]
    finally:
        stop_server(srv2)
    assert [p["id"] for p in preds] == [f"t{i}" for i in range(N_TASKS)]
    assert all(p["entailment"] in ("yes", "maybe", "no") for p in preds), preds
    parents, after = predict_rows(srv2.data)
    assert list(parents) == [parent_id] and sorted(after) == sorted(before)  # no new jobs
    assert {p["job_id"] for p in preds} == set(after)  # the answers are those jobs'
    for job_id, row in after.items():
        assert (row["state"], row["results"]) == ("done", 1), row  # scored exactly once
        starts = before[job_id]["attempts"] + (1 if job_id in left else 0)
        assert row["attempts"] == starts, (job_id, row, before[job_id])
    print(f"\nFAULTS batch_predict kill-9: 1 fault, {len(left)} of {N_TASKS} task(s) "
          "resumed, duplicates 0, lost 0")


CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]


def start_app(tmp: Path, data: Path, media: Path) -> tuple[Any, str, Path]:
    """``streamlit run app.py`` (the README's way) on a free port, on ``serve``'s data dir."""
    import os
    import subprocess
    import sys

    from service_server import free_port

    port, log = free_port(), tmp / "app.log"
    env = {k: v for k, v in os.environ.items() if k != "CHORD_TEST_ENGINE_MODE"}
    env.update(CHORD_MODEL="test", CHORD_DATA_DIR=str(data), CHORD_MEDIA_ROOTS=str(media),
               CHORD_CPU_WORKERS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, f"the app exited {proc.returncode}: {log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False
    wait_for(healthy, timeout=120, every=0.3)
    return proc, url, log


def owner_of_pid(data: Path, pid: int) -> str | None:
    """The lease a process holds in the store (the app's manager takes one as it starts)."""
    with sqlite3.connect(f"file:{data / 'chord.sqlite3'}?mode=ro", uri=True, timeout=10) as c:
        row = c.execute("SELECT owner_id FROM owners WHERE pid = ?", (pid,)).fetchone()
    return None if row is None else str(row[0])


@pytest.mark.e2e
def test_the_real_app_started_beside_a_busy_serve_runs_none_of_its_jobs(
        tmp_path: Path, tiny_model_dir: Path, clip: Path) -> None:
    """The real Streamlit app (its manager starts with the first page a browser opens) and a
    busy ``serve`` on one data dir: the app claims none of the service's jobs, runs none of
    them (each is started once, finished once, by the service's lease) and changes none of
    their rows; nothing in either log says a row was fought over."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium package")
    sync_api = pytest.importorskip("playwright.sync_api")
    srv = start_server(tmp_path, "--cpu-workers", "1", timeout=STARTUP_S)
    app = None
    try:
        theirs = [submit_ground(srv, clip, fps) for fps in (2.0, 1.0, 1.0)]
        wait_for(lambda: running_with_progress(srv, theirs[0]))
        before = rows(srv.data)
        app, url, app_log = start_app(tmp_path, srv.data, srv.media)
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                        args=["--no-sandbox", "--disable-gpu"])
            try:
                browser.new_page().goto(url, wait_until="domcontentloaded")
                app_owner = wait_for(lambda: owner_of_pid(srv.data, app.pid),
                                     timeout=STARTUP_S)  # the app's manager is up
            finally:
                browser.close()
        for job_id in theirs:
            wait_for(lambda: call(srv, "GET", f"/v1/jobs/{job_id}")[1]["state"] == "done",
                     timeout=300)
        after = rows(srv.data)
    finally:
        if app is not None:
            app.terminate()
            app.wait(30)
        stop_server(srv)
    assert sorted(after) == sorted(theirs)  # the app added no job and took none over
    for job_id in theirs:
        row = after[job_id]
        assert (row["state"], row["results"], row["attempts"]) == ("done", 1, 1), row
        assert row["owner"] == before[job_id]["owner"] != app_owner, row
        if before[job_id]["started_at"] is not None:  # not re-queued: the same start
            assert row["started_at"] == before[job_id]["started_at"], row
    for log in (srv.log.read_text(), app_log.read_text()):
        assert "cannot go from" not in log and "Traceback" not in log, log[-3000:]
        assert "whose owner is gone" not in log, log[-3000:]  # no one claimed anything
    print(f"\nFAULTS real app beside serve: {len(theirs)} service job(s), run twice 0, "
          "rows changed by the other process 0")
