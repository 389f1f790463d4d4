"""Media hardening of the service through a real uvicorn (issue 25, the media half): a file
swapped for a link after the submit-time check is refused when the worker opens it, and
typed paths with a NUL byte or ``~name`` get a 400 that says why."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest
from service_server import Server, start_server, stop_server

from chord_core.testing.videos import make_video


@pytest.fixture(scope="module")
def one_worker(tiny_model_dir, tmp_path_factory) -> Server:
    """A service with one CPU worker and no read-ahead: a job queued behind a busy worker is
    read only when that worker takes it (read-ahead could read it before the swap)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHORD_READ_AHEAD", "0")
        srv = start_server(tmp_path_factory.mktemp("swap-service"), "--cpu-workers", "1")
    yield srv
    stop_server(srv)


def _wait_finished(c: httpx.Client, job_id: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = c.get(f"/v1/jobs/{job_id}").json()
        if view["state"] in ("done", "failed", "cancelled"):
            return view
        time.sleep(0.2)
    pytest.fail(f"job {job_id} did not finish in {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 1.0], ids=["at-once", "after-planning"])
def test_a_link_swapped_in_while_the_job_is_queued_is_refused(one_worker, tmp_path,
                                                              delay_s) -> None:
    """The issue's case: the worker is busy, ``media/swap.mp4`` is submitted (202), then
    replaced by a symlink to a clip outside the roots. The job fails with the open-time
    message; the outside clip's 96×80 size and 20 frames appear nowhere. At once, the
    manager's planning probe refuses it; after planning (the clip was probed before the
    swap), the worker's reader does."""
    srv = one_worker
    busy = make_video(srv.media / f"busy{delay_s:g}.mp4", duration_s=20.0, fps=10.0, size_wh=(160, 120))
    swap = make_video(srv.media / f"swap{delay_s:g}.mp4", duration_s=1.0, fps=10.0, size_wh=(64, 48)).path
    outside = make_video(tmp_path / "outside.mp4", duration_s=2.0, fps=10.0,
                         size_wh=(96, 80)).path
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        ground = c.post("/v1/jobs", json={"task": "ground", "video_path": str(busy.path),
                                          "target": "the square", "fps": 2}).json()["job_id"]
        r = c.post("/v1/jobs", json={"task": "describe", "video_path": str(swap),
                                     "max_new_tokens": 8})
        assert r.status_code == 202, r.text
        time.sleep(delay_s)
        assert c.get(f"/v1/jobs/{r.json()['job_id']}").json()["state"] == "queued"
        swap.unlink()
        os.symlink(outside, swap)
        job = r.json()["job_id"]
        assert c.get(f"/v1/jobs/{ground}").json()["state"] == "running"  # the worker is busy
        c.delete(f"/v1/jobs/{ground}")  # now the worker takes the swapped job
        view = _wait_finished(c, job)
        result = c.get(f"/v1/jobs/{job}/result")
    assert view["state"] == "failed", view
    assert view["error"]["error"] == (f"{swap} is not a file under the media roots "
                                      f"({os.path.realpath(srv.media)}, "
                                      f"{os.path.realpath(srv.data / 'uploads')})")
    assert result.status_code == 409
    text = json.dumps(view) + result.text
    for leak in ("96×80", "96x80", '"width": 96', '"height": 80', '"frame_count": 20',
                 "outside.mp4", "Traceback"):
        assert leak not in text


@pytest.mark.parametrize(("path", "words"), [
    ("/media/a\x00b.mp4", "NUL byte"),
    ("~nosuchuser/x.mp4", "does not expand another account's home folder"),
    ("~root/x.mp4", "does not expand another account's home folder"),
], ids=["nul-byte", "unknown-account", "root-account"])
def test_nul_bytes_and_other_accounts_are_a_clear_400(server, path, words) -> None:
    """Were a 500 ("embedded null byte"), and ``~nosuchuser`` a 500 where ``~root`` was a 400
    (an account oracle): now the media roots' path parser refuses both, the same way."""
    r = httpx.post(server.url + "/v1/jobs", json={"task": "describe", "video_path": path})
    assert r.status_code == 400, r.text
    assert words in r.json()["error"] and r.json()["hint"]
    assert "Traceback" not in r.text
