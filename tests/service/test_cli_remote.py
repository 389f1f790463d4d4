"""The one-clip CLI hands its work to a running ``serve``: the same document, the same exit
codes, and no model (not even torch) in the CLI's own process."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from service_server import ROOT, Server

from chord_core.cli import remote
from chord_core.errors import ConfigError
from chord_core.service import discovery

SCHEMA = json.loads((ROOT / "docs" / "result.schema.json").read_text())


def _cli(*args: str, data: Path, **env: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, with ``-X importtime`` so the test sees what it imported."""
    full = {k: v for k, v in os.environ.items() if k not in ("CHORD_MODEL", "CHORD_SERVER")}
    full.update(CHORD_DATA_DIR=str(data), **env)
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "chord_core", *args],
                          cwd=ROOT, env=full, capture_output=True, text=True, timeout=180)


def _imported(stderr: str) -> set[str]:
    return {line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


def _job_of(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("note: running on the Chord"))
    return line.rsplit("job ", 1)[1].split(";")[0].strip()


def test_serve_advertises_itself_in_its_data_dir(server: Server) -> None:
    doc = discovery.advertised(server.data)
    assert doc is not None and doc["url"] == server.url and doc["pid"] == server.proc.pid
    assert doc["model"] == "test"
    assert (server.data / discovery.FILE_NAME).stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("task,text", [("describe", ""), ("ground", "the square"),
                                       ("entail", "a square moves")], ids=str)
def test_cli_found_service_runs_the_job_and_loads_nothing(server: Server, media, task: str,
                                                          text: str) -> None:
    args = [task, str(media["clip"])] + ([text] if text else [])
    out = _cli(*args, data=server.data)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["task"] == task and doc["model"]["test_model"] is True
    mods = _imported(out.stderr)
    assert "chord_core.cli.remote" in mods
    # no model in the CLI: the clip's probe (OpenCV, PyAV) decides long-video mode, as locally
    assert not {"torch", "transformers", "accelerate"} & mods
    job = _job_of(out.stderr)
    with urllib.request.urlopen(f"{server.url}/v1/jobs/{job}", timeout=10) as resp:
        assert json.loads(resp.read())["state"] == "done"  # the service ran it


def test_clip_outside_the_service_roots_is_uploaded(server: Server, tmp_path: Path) -> None:
    from chord_core.testing.videos import make_video

    clip = make_video(tmp_path / "mine.mp4", duration_s=1.0, fps=8.0, size_wh=(96, 64)).path
    out = _cli("describe", str(clip), "--json", str(tmp_path / "r.json"),
               "--server", server.url, data=tmp_path / "elsewhere")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "uploaded (outside the service's media roots)" in out.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["video"]["width"] == 96 and doc["video"]["height"] == 64


def test_a_failed_job_exits_2_like_bad_input_does_locally(server: Server) -> None:
    bad = server.media / "broken.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    out = _cli("describe", str(bad), data=server.data)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "error:" in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == ""


def _args(**kw: object) -> argparse.Namespace:
    base = dict(command="describe", local=False, server=None, model=None, method="per_frame",
                scores=False, annotated_video=None, batch_size=None, device=None,
                max_memory=None, allow_offload=None, strategy=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("kw,why", [
    ({"local": True}, "--local"),
    ({"scores": True}, "--scores needs the model in this process"),
    ({"method": "two_pass"}, "--method two_pass needs the model"),
    ({"model": "Qwen/Qwen2.5-VL-7B-Instruct"}, "is not the one the service serves"),
], ids=["local", "scores", "two-pass", "other-model"])
def test_local_when_asked_or_when_the_service_cannot_carry_it(
        server: Server, monkeypatch, kw: dict, why: str) -> None:
    monkeypatch.setenv("CHORD_DATA_DIR", str(server.data))
    monkeypatch.delenv("CHORD_SERVER", raising=False)
    monkeypatch.delenv("CHORD_MODEL", raising=False)
    assert remote.choose_server(_args())[0] == server.url  # the baseline goes remote
    url, reason = remote.choose_server(_args(**kw))
    assert url is None and why in reason


def test_a_named_server_with_a_local_only_option_is_refused(monkeypatch) -> None:
    monkeypatch.delenv("CHORD_SERVER", raising=False)
    with pytest.raises(ConfigError, match="--scores"):
        remote.choose_server(_args(server="http://127.0.0.1:9", scores=True))


def test_a_stale_advertisement_is_ignored(tmp_path: Path, monkeypatch) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / discovery.FILE_NAME).write_text(json.dumps(
        {"url": "http://127.0.0.1:9", "pid": dead.pid, "model": "test", "token": "ab" * 32}))
    os.chmod(tmp_path / discovery.FILE_NAME, 0o600)
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("CHORD_SERVER", raising=False)
    assert discovery.advertised(tmp_path) is None
    url, why = remote.choose_server(_args())
    assert url is None and why.startswith("no Chord service is running on this machine")


def test_withdraw_leaves_another_process_advertisement(tmp_path: Path) -> None:
    path = discovery.advertise("http://127.0.0.1:1", "test", tmp_path)
    assert path is not None and json.loads(path.read_text())["pid"] == os.getpid()
    path.write_text(json.dumps({"url": "http://127.0.0.1:2", "pid": 1, "model": "x"}))
    discovery.withdraw(path)
    assert path.exists()  # not ours any more
    discovery.advertise("http://127.0.0.1:1", "test", tmp_path)
    discovery.withdraw(path)
    assert not path.exists()
