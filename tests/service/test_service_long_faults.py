"""A long-video run through the service survives the service (issue 38): ``serve`` killed
(kill -9, SIGTERM) mid-chapters and started again on the same data dir drives the open run
on by itself — no client sends anything again — and it finishes: every chunk job ran once
(one stored result each; a chunk done before the kill was not started again), the parent
ended done once with its document. Counted from the store's rows, not from the code under
test's say-so; each test prints its figures (``FAULTS …``) for docs/reliability.md."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from service_server import start_server, stop_server
from test_service_faults import STARTUP_S, call, rows, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # two service starts each
CHUNKS = 8
ONE_AT_A_TIME = ("--cpu-workers", "1", "--batch-size", "1")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_serve_stopped_mid_chapters_finishes_the_run_after_a_restart(
        tmp_path: Path, tiny_model_dir: Path, sig: signal.Signals) -> None:
    from chord_core.testing.videos import make_video

    (tmp_path / "media").mkdir()
    clip = make_video(tmp_path / "media" / "talk.mp4", duration_s=2.0 * CHUNKS, fps=8.0,
                      size_wh=(96, 64)).path
    body = {"task": "chapters", "video_path": str(clip), "chunk_s": 2, "cuts": "fixed",
            "chapter_s": 8, "frames_per_chunk": 4, "max_new_tokens": 128}
    # one chunk a generate call (two in flight): with the default batch the worker took all
    # eight chunks into one describe batch, they ended together, and a clean machine never
    # saw the run mid-way (the stop came after the last chunk)
    srv = start_server(tmp_path, *ONE_AT_A_TIME, timeout=STARTUP_S)
    try:
        status, answer = call(srv, "POST", "/v1/jobs", body)
        assert status == 202, answer
        run = answer["job_id"]

        def chunks_done() -> int:
            return sum(1 for k, r in rows(srv.data).items()
                       if r["parent"] == run and "-c0" in k and r["state"] == "done")
        wait_for(chunks_done, timeout=300, every=0.05)
        srv.proc.send_signal(sig)
        srv.proc.wait(60)
    finally:
        if srv.proc.poll() is None:
            stop_server(srv)
    before = rows(srv.data)
    kids_before = {k: r for k, r in before.items() if r["parent"] == run}
    done_before = {k for k, r in kids_before.items() if r["state"] == "done"}
    assert before[run]["state"] == "running", before[run]  # left open, not ended
    assert 1 <= len({k for k in done_before if "-c0" in k}) < CHUNKS, kids_before

    srv2 = start_server(tmp_path, *ONE_AT_A_TIME, timeout=STARTUP_S)
    try:  # the restarted service drives the run on by itself
        view = wait_for(lambda: (v := call(srv2, "GET", f"/v1/jobs/{run}")[1])["state"]
                        == "done" and v, timeout=600)
        status, doc = call(srv2, "GET", f"/v1/jobs/{run}/result")
        after = rows(srv2.data)
    finally:
        stop_server(srv2)
    assert status == 200 and doc == view["document"] and doc["run_id"] == run
    assert len(doc["chunks"]) == len(doc["chunk_texts"]) == CHUNKS
    kids = {k: r for k, r in after.items() if r["parent"] == run}
    assert sorted(after) == sorted(set(before) | set(kids) | {run})  # no other rows
    assert len([k for k in kids if "-c0" in k]) == CHUNKS
    for job_id, row in kids.items():
        assert (row["state"], row.get("results")) == ("done", 1), row  # stored once
        if job_id in done_before:  # done before the stop: never started again
            assert row["attempts"] == kids_before[job_id]["attempts"], row
        else:  # cut short or never started: one start more at most, never two
            assert row["attempts"] <= kids_before.get(job_id, {"attempts": 0})["attempts"] \
                + 1, row
    parent = after[run]
    assert parent["state"] == "done" and parent["attempts"] == before[run]["attempts"] + 1
    log = srv2.log.read_text()
    assert "Traceback" not in log and "not resumed" not in log, log[-3000:]
    resumed = len(kids) - len(done_before)
    print(f"\nFAULTS serve {sig.name} mid-chapters: 1 fault, {len(done_before)} child job(s) "
          f"kept, {resumed} run after the restart, duplicates 0, lost 0, parent ended once")
