"""Media hardening of the service through a real uvicorn (issue 25, the media half): a file
swapped for a link after the submit-time check is refused when the worker opens it; typed
paths with a NUL byte or ``~name`` get a 400 that says why; one image format policy on
every route (multipart, server path, ``/batch_predict``); pixels capped per image and per
request."""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path

import httpx
import pytest
from service_server import Server, start_server, stop_server

from chord_core.testing.videos import make_video

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_image_policy import REFUSED, image_bytes  # noqa: E402  (real bytes of each format)

IMAGE_CAP, REQUEST_CAP = 30_000, 50_000  # pixels, for the one-worker service


@pytest.fixture(scope="module")
def one_worker(tiny_model_dir, tmp_path_factory) -> Server:
    """A service with one CPU worker and no read-ahead: a job queued behind a busy worker is
    read only when that worker takes it (read-ahead could read it before the swap)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHORD_READ_AHEAD", "0")
        mp.setenv("CHORD_MAX_IMAGE_PIXELS", str(IMAGE_CAP))
        mp.setenv("CHORD_MAX_REQUEST_PIXELS", str(REQUEST_CAP))
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
        deadline = time.monotonic() + 60  # the worker busy first, as in the case
        while c.get(f"/v1/jobs/{ground}").json()["state"] != "running":
            assert time.monotonic() < deadline, "the busy job never started"
            time.sleep(0.05)
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
                                      f"{os.path.realpath(srv.data / 'uploads')}, "
                                      f"{os.path.realpath(srv.data / 'streams')})")
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


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("fmt", REFUSED, ids=REFUSED)
def test_one_format_policy_on_every_route(server, fmt) -> None:
    """The same bytes named ``x.png`` — a multipart upload, a file under the media root, a
    ``/batch_predict`` task, a chat data URL — are refused the same way (uploads and server
    paths accepted GIF, TIFF, TGA, PPM, PCX, SGI, ICO, IM and DDS)."""
    data = image_bytes(fmt)
    under_root = server.media / f"policy-{fmt.lower()}.png"
    under_root.write_bytes(data)
    with httpx.Client(base_url=server.url, timeout=60) as c:
        upload = c.post("/v1/jobs", data={"task": "entail", "statement": "a red square"},
                        files={"file": ("x.png", data, "image/png")})
        by_path = c.post("/v1/jobs", json={"task": "entail", "statement": "a red square",
                                           "video_path": str(under_root)})
        batch = c.post("/batch_predict", json={"tasks": [{"image_data": _b64(data),
                                                          "text": "a red square"}]})
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url",
             "image_url": {"url": f"data:image/png;base64,{_b64(data)}"}}]}]})
    assert upload.status_code == by_path.status_code == chat.status_code == 400
    errors = [upload.json()["error"], by_path.json()["error"],
              chat.json()["error"]["message"], batch.json()["predictions"][0]["error"]]
    assert all("is not a PNG, JPEG, WebP or BMP image" in e for e in errors), errors
    assert all(p.read_bytes() != data for p in (server.data / "uploads" / "api").iterdir())


@pytest.mark.slow
def test_pixels_are_capped_per_image_and_per_request(one_worker) -> None:
    """With the caps at 30,000 pixels an image and 50,000 a request: a 200×200 image is
    refused before it is decoded; of three 150×150 images (22,500 each) the first two are
    queued and the third gets the request-total error, the others keep their answers."""
    def png(wh: tuple[int, int]) -> str:
        return _b64(image_bytes("PNG", wh))

    with httpx.Client(base_url=one_worker.url, timeout=120) as c:
        big = c.post("/v1/jobs", data={"task": "entail", "statement": "a red square"},
                     files={"file": ("big.png", base64.b64decode(png((200, 200))))})
        tasks = [{"id": i, "image_data": png((150, 150)), "text": "a red square"}
                 for i in range(3)]
        batch = c.post("/batch_predict", json={"tasks": tasks})
    assert big.status_code == 400
    assert big.json()["error"].endswith("is 200×200 (40,000 pixels); the limit is 30,000 "
                                        "pixels")
    preds = batch.json()["predictions"]
    assert [("entailment" in p) for p in preds] == [True, True, False], preds
    assert preds[2]["error"] == ("task 2's image (150×150) takes the request's images past "
                                 "50,000 pixels in all")
    assert "CHORD_MAX_REQUEST_PIXELS" in preds[2]["hint"]
