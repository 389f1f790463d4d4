"""The real service (``python -m chord_core serve``, test model, one CPU worker) under an
attacker's and a careless client's inputs (issue 25): server-side caps, paths with NUL or
``~user``, bad text in one batch task, deep JSON, lone surrogates, zero-width statements,
the key from a file, upload retention and modes, and a full disk (a small tmpfs, when this
runs as root) answered 507."""

from __future__ import annotations

import base64
import io
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from service_server import Server, start_server, stop_server

KEY = "file-key-0123"
AUTH = {"authorization": f"Bearer {KEY}"}
CAPS = {"CHORD_API_MAX_FRAMES": "8", "CHORD_API_MAX_PIXELS": "200704",
        "CHORD_API_MAX_VISUAL_TOKENS": "4000", "CHORD_API_MAX_NEW_TOKENS": "64"}
RETENTION_S = 5.0
TMPFS_BYTES = 4 * 1024 * 1024


def _mount_tmpfs(folder: Path) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES},mode=0755",
                           "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


@pytest.fixture(scope="module")
def hard(tiny_model_dir, tmp_path_factory) -> Server:
    """A keyed service (key from a file) with small caps and a 5 s upload retention; its
    data dir made 0755 beforehand, its uploads folder a 4 MiB tmpfs when possible."""
    tmp = tmp_path_factory.mktemp("hardened")
    data = tmp / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    mounted = _mount_tmpfs(data / "uploads")
    (tmp / "key").write_text(KEY + "\n")
    env = {"CHORD_API_KEY_FILE": str(tmp / "key"), **CAPS,
           "CHORD_API_UPLOAD_RETENTION_H": str(RETENTION_S / 3600)}
    try:
        srv = start_server(tmp, "--cpu-workers", "1", env=env, timeout=300)
        srv.mounted = mounted  # type: ignore[attr-defined]
        clip_and_images(srv.media)
        yield srv
        stop_server(srv)
    finally:
        if mounted:
            subprocess.run(["umount", str(data / "uploads")], check=False)


def clip_and_images(media: Path) -> None:
    from chord_core.testing.videos import make_video

    make_video(media / "clip.mp4", duration_s=2.0, fps=10.0, size_wh=(160, 120))
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)).save(media / "i.png")


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _b64(seed: int) -> str:
    return base64.b64encode(_png(seed)).decode()


def _error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    text = err["message"] if isinstance(err, dict) else err
    assert text and "Traceback" not in r.text
    assert isinstance(err, dict) or r.json()["hint"]
    return text


def _job(srv: Server, body: dict) -> httpx.Response:
    return httpx.post(srv.url + "/v1/jobs", json=body, headers=AUTH, timeout=60)


def _chat(srv: Server, text: str, url: str, **extra) -> httpx.Response:
    kind = "video_url" if url.endswith(".mp4") else "image_url"
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": text},
                                                      {"type": kind, kind: {"url": url}}]}],
            **extra}  # json.dumps sends a lone surrogate as its escape; httpx would refuse it
    return httpx.post(srv.url + "/v1/chat/completions", timeout=120, content=json.dumps(body),
                      headers={**AUTH, "content-type": "application/json"})


def _done(srv: Server, job_id: str) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        view = httpx.get(f"{srv.url}/v1/jobs/{job_id}", headers=AUTH).json()
        if view["state"] in ("done", "failed", "cancelled"):
            return httpx.get(f"{srv.url}/v1/jobs/{job_id}/result", headers=AUTH).json()
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")


@pytest.mark.parametrize("extra,words", [
    ({"fps": 30, "max_frames": 1000000, "token_budget": 1000000000},
     ["max_frames 1,000,000", "CHORD_API_MAX_FRAMES", "CHORD_API_MAX_VISUAL_TOKENS"]),
    ({"max_frames": 9}, ["cap of 8", "CHORD_API_MAX_FRAMES"]),
    ({"max_pixels": 1000000}, ["max_pixels", "CHORD_API_MAX_PIXELS"]),
    ({"token_budget": 4001}, ["token_budget", "CHORD_API_MAX_VISUAL_TOKENS"]),
    ({"max_new_tokens": 65}, ["max_new_tokens 65", "CHORD_API_MAX_NEW_TOKENS"]),
    ({"max_new_tokens": 0}, ["at least 1"]),
    ({"fps": 1000}, ["fps"]),
], ids=["the-probe", "frames", "pixels", "tokens", "new-tokens", "zero-tokens", "fps"])
def test_a_job_over_a_cap_is_refused_naming_it(hard, extra, words) -> None:
    clip = str(hard.media / "clip.mp4")
    text = _error(_job(hard, {"task": "describe", "video_path": clip, **extra}), 400)
    assert all(w in text for w in words), text


def test_grounding_frames_are_held_to_what_the_token_cap_pays_for(hard) -> None:
    clip = str(hard.media / "clip.mp4")
    body = {"task": "ground", "video_path": clip, "target": "a square", "max_frames": 8,
            "token_budget": 512}
    assert "ask for at most 4 frames" in _job(hard, body).json()["hint"]


@pytest.mark.slow  # a real job (or the retention) runs: ≈ 6–20 s here
def test_a_request_that_asks_nothing_gets_the_defaults_lowered_to_the_caps(hard) -> None:
    clip = str(hard.media / "clip.mp4")
    r = _job(hard, {"task": "describe", "video_path": clip, "fps": 10})  # 20 frames wanted
    assert r.status_code == 202, r.text
    doc = _done(hard, r.json()["job_id"])
    assert len(doc["sampling"]["frame_indices"]) <= 8
    assert doc["sampling"]["visual_tokens"] <= 4000
    w, h = doc["sampling"]["input_wh"]
    assert w * h <= 200704
    r = _chat(hard, "what is it?", str(hard.media / "i.png"))
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 64
    assert "CHORD_API_MAX_NEW_TOKENS" in _error(_chat(hard, "hi", str(hard.media / "i.png"),
                                                      max_tokens=65), 400)


@pytest.mark.parametrize("where,value", [
    ("json", "{media}/clip\x00.mp4"), ("form", "{media}/clip.mp4\x00"),
    ("image_url", "{media}/i\x00.png"), ("video_url", "file://{media}/clip\x00.mp4"),
], ids=["video_path", "form-path", "image_url", "video_url"])
def test_a_nul_byte_in_any_path_field_is_a_400(hard, where, value) -> None:
    value = value.format(media=hard.media)
    if where == "json":
        r = _job(hard, {"task": "describe", "video_path": value})
    elif where == "form":
        r = httpx.post(hard.url + "/v1/jobs", headers=AUTH,  # multipart (a form is 415)
                       data={"task": "describe", "video_path": value},
                       files={"note": ("note.txt", b"")})
    else:
        r = httpx.post(hard.url + "/v1/chat/completions", headers=AUTH, json={
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"}, {"type": where, where: {"url": value}}]}]})
    assert "NUL byte" in _error(r, 400)


def test_tilde_user_is_never_expanded_so_no_account_shows(hard) -> None:
    answers = []
    for name in ("~root/x.mp4", "~nosuchuser1234/x.mp4", "~/x.mp4"):
        r = _job(hard, {"task": "describe", "video_path": name})
        answers.append((r.status_code, _error(r, 400).replace(name, "NAME")))
    assert len(set(answers)) == 1, answers  # one answer, whoever exists


@pytest.mark.parametrize("bad", [5, 1.5, True, {}, ["a"], "\u200b\u200c\ufeff", "\ud800"],
                         ids=["int", "float", "bool", "object", "list", "zero-width",
                              "surrogate"])
def test_bad_text_in_one_batch_task_costs_only_that_task(hard, bad) -> None:
    tasks = [{"id": "good", "image_data": _b64(2), "text": "a picture"},
             {"id": "bad", "image_data": _b64(3), "text": bad}]
    raw = json.dumps({"tasks": tasks})  # "\ud800" goes out as that escape
    r = httpx.post(hard.url + "/batch_predict", headers={**AUTH, "content-type":
                   "application/json"}, content=raw.encode(), timeout=120)
    assert r.status_code == 200, r.text
    good, wrong = r.json()["predictions"]
    assert good["id"] == "good" and good["entailment"] in ("yes", "maybe", "no")
    assert wrong["id"] == "bad" and wrong["error"] and wrong["hint"] and "entailment" not in wrong
    if bad == "\u200b\u200c\ufeff":  # refused exactly like an empty statement
        empty = httpx.post(hard.url + "/batch_predict", headers=AUTH, timeout=120, json={
            "tasks": [{"id": "bad", "image_data": _b64(3), "text": ""}]}).json()
        assert empty["predictions"][0]["error"] == wrong["error"]


@pytest.mark.parametrize("path", ["/v1/jobs", "/batch_predict", "/v1/chat/completions"])
def test_deep_json_is_a_400(hard, path) -> None:
    r = httpx.post(hard.url + path, headers={**AUTH, "content-type": "application/json"},
                   content=b"[" * 100000)
    assert "nested too deeply" in _error(r, 400)


def test_a_lone_surrogate_in_a_prompt_or_chat_text_is_a_400(hard) -> None:
    clip = str(hard.media / "clip.mp4")
    raw = json.dumps({"task": "describe", "video_path": clip, "prompt": "a\ud800b"})
    r = httpx.post(hard.url + "/v1/jobs", headers={**AUTH, "content-type": "application/json"},
                   content=raw.encode())
    assert "surrogate" in _error(r, 400)
    r = _chat(hard, "what\udfff?", str(hard.media / "i.png"))
    assert "surrogate" in _error(r, 400)
    listed = httpx.get(hard.url + "/v1/models", headers=AUTH)
    assert listed.status_code == 200  # and nothing was stored that later answers 500


def test_a_zero_width_statement_is_refused_like_an_empty_one(hard) -> None:
    img = str(hard.media / "i.png")
    empty = _error(_job(hard, {"task": "entail", "video_path": img, "statement": ""}), 400)
    blank = _error(_job(hard, {"task": "entail", "video_path": img,
                               "statement": "\u200b\u2060\u200d"}), 400)
    assert blank == empty


def test_the_key_comes_from_a_file_and_a_key_on_the_command_line_warns(hard, capsys) -> None:
    assert httpx.get(hard.url + "/v1/models").status_code == 401
    assert httpx.get(hard.url + "/v1/models", headers=AUTH).status_code == 200
    from chord_core.__main__ import build_parser
    from chord_core.service.cli import _settings

    args = build_parser().parse_args(["serve", "--api-key", "on-argv"])
    assert _settings(args).api_key == "on-argv"
    assert "--api-key shows in ps" in capsys.readouterr().err


@pytest.mark.slow  # a real job (or the retention) runs: ≈ 6–20 s here
def test_uploads_are_private_and_go_after_the_retention(hard) -> None:
    uploads = hard.data / "uploads"
    for folder in (uploads, uploads / "api"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert "is open to other users (mode 0755)" in hard.log.read_text()
    r = httpx.post(hard.url + "/batch_predict", headers=AUTH, timeout=120,
                   json={"tasks": [{"image_data": _b64(40), "text": "a picture"}]})
    stored = Path(_done(hard, r.json()["predictions"][0]["job_id"])["video"]["path"])
    assert stored.parent == uploads / "api" and stored.exists()
    deadline = time.monotonic() + RETENTION_S + 15
    while stored.exists() and time.monotonic() < deadline:
        time.sleep(0.25)
    assert not stored.exists()


def _fill(folder: Path) -> Path:
    filler = folder / "filler"
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_is_a_507_that_says_so(hard) -> None:
    if not getattr(hard, "mounted", False):
        pytest.skip("needs root to mount a small tmpfs for the uploads")
    filler = _fill(hard.data / "uploads")
    try:
        big = base64.b64encode(os.urandom(64 * 1024)).decode()
        batch = httpx.post(hard.url + "/batch_predict", headers=AUTH, timeout=60,
                           json={"tasks": [{"image_data": big, "text": "a picture"}]})
        chat = _chat(hard, "hi", "data:image/png;base64," + _b64(50))
        form = httpx.post(hard.url + "/v1/jobs", headers=AUTH, data={"task": "describe"},
                          files={"file": ("x.png", _png(51), "image/png")})
        for r in (batch, chat, form):
            assert "disk is full" in _error(r, 507)
        assert "CHORD_DATA_DIR" in batch.json()["hint"]
    finally:
        filler.unlink()
    r = httpx.post(hard.url + "/batch_predict", headers=AUTH, timeout=120,
                   json={"tasks": [{"image_data": _b64(52), "text": "a picture"}]})
    assert r.status_code == 200 and "entailment" in r.json()["predictions"][0]
