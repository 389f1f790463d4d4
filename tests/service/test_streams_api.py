"""``/v1/streams`` on the shared real service (uvicorn, two CPU workers, the tiny model)
against a real RTSP server on 127.0.0.1 (GStreamer's, with a user and password): a stream
is started, its state and masked URL show in the list and in ``/health``, its chunks are
analysed by the service's own workers, stopping keeps them, and bad requests are clear
errors that never echo the password."""

from __future__ import annotations

import time

import httpx
import pytest

from chord_core.testing import rtsp

pytestmark = pytest.mark.slow
PASSWORD = "api-s3cret-pw"


@pytest.fixture(scope="module")
def camera(tmp_path_factory):
    if rtsp.missing():
        pytest.skip(rtsp.missing() or "")
    clip = rtsp.make_clip(tmp_path_factory.mktemp("cam") / "street.mp4", seconds=8,
                          loop_s=120)
    with rtsp.RtspServer(clip, user="cam", password=PASSWORD) as srv:
        yield srv


def test_a_stream_through_the_service_is_recorded_analysed_and_kept(server, camera):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        r = c.post("/v1/streams", json={"url": camera.url(0), "chunk_s": 2,
                                        "statements": ["a car passes"], "threshold": 0.0,
                                        "describe": False})
        assert r.status_code == 201, r.text
        assert PASSWORD not in r.text
        sid = r.json()["id"]
        assert r.json()["shown"].startswith("rtsp://***@127.0.0.1:")
        deadline, chunks = time.monotonic() + 90, []
        while time.monotonic() < deadline:
            chunks = [ch for ch in c.get(f"/v1/streams/{sid}").json()["recent"]
                      if ch["state"] == "done"]
            if len(chunks) >= 2:
                break
            time.sleep(0.5)
        assert len(chunks) >= 2
        health = c.get("/health").json()
        [line] = [s for s in health["streams"] if s["id"] == sid]
        assert line["state"] == "live" and PASSWORD not in str(health)
        for ch in chunks:  # each chunk's jobs are the service's jobs, done, with results
            [job_id] = ch["jobs"]["entail"].values()
            job = c.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "done", job
        alerts = c.get("/v1/alerts").json()
        assert PASSWORD not in str(alerts)
        stopped = c.delete(f"/v1/streams/{sid}")
        assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
        listed = c.get("/v1/streams").json()["streams"]
        [row] = [s for s in listed if s["id"] == sid]
        assert row["state"] == "stopped" and row["recent"]  # the results stay
        assert PASSWORD not in str(listed)


@pytest.mark.parametrize("body, status, says", [
    ({"url": "ftp://cam:hunter22@127.0.0.1/x"}, 400, "not a stream"),
    ({"url": "rtsp://cam:hunter22@127.0.0.1/x", "chunk_s": 0.1}, 422, "chunk_s"),
    ({"url": "rtsp://127.0.0.1/x", "statements": ["x"] * 17}, 422, "statements"),
    ({"url": "rtsp://127.0.0.1/x", "extra": 1}, 422, "extra")])
def test_bad_stream_requests_are_clear_and_never_echo_the_password(server, body, status, says):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.post("/v1/streams", json=body)
    assert r.status_code == status, r.text
    assert says in r.text and "hunter22" not in r.text and "Traceback" not in r.text
    assert r.json()["hint"]


def test_an_unknown_stream_is_404(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/v1/streams/live-0123456789").status_code == 404
        assert c.delete("/v1/streams/../../etc").status_code == 404
