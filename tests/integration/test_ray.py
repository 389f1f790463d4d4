"""Chord on a real Ray cluster started by the test: a head and a second node (``ray start``,
one logical CPU each, so one CPU worker lands on each node), the tiny test model.

* a batch spread over both nodes, one worker's actor killed mid-batch: every clip finishes,
  once, and the killed worker is replaced;
* the service answering through Ray.
"""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
START_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive_nodes(address: str) -> int:
    code = ("import ray; ray.init(address=%r, log_to_driver=False, configure_logging=False);"
            "print(sum(n['Alive'] for n in ray.nodes()))" % address)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=_env())
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


def _env() -> dict[str, str]:
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory, tiny_model_dir):
    """A two-node Ray cluster on this machine; both nodes stopped (with their workers) after."""
    port = _free_port()
    address = f"127.0.0.1:{port}"
    temp = Path(f"/tmp/chord-ray-{os.getpid()}")  # short: Ray's socket paths must fit
    logs = tmp_path_factory.mktemp("ray")
    common = ["--block", "--num-cpus", "1", "--num-gpus", "0", "--disable-usage-stats"]
    head = subprocess.Popen([str(RAY), "start", "--head", "--port", str(port),
                             "--include-dashboard", "false", "--temp-dir", str(temp), *common],
                            stdout=(logs / "head.log").open("w"), stderr=subprocess.STDOUT,
                            env=_env(), start_new_session=True)
    nodes = [head]
    try:
        deadline = time.monotonic() + START_S
        while _alive_nodes(address) < 1:
            assert head.poll() is None and time.monotonic() < deadline, \
                (logs / "head.log").read_text()[-2000:]
            time.sleep(1)
        second = subprocess.Popen([str(RAY), "start", "--address", address, *common],
                                  stdout=(logs / "node2.log").open("w"),
                                  stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
        nodes.append(second)
        while _alive_nodes(address) < 2:
            assert second.poll() is None and time.monotonic() < deadline, \
                (logs / "node2.log").read_text()[-2000:]
            time.sleep(1)
        yield address
    finally:
        for proc in reversed(nodes):  # `ray start --block` stops its node's processes
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in nodes:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        leftovers = [p for p in psutil.process_iter(["cmdline"])
                     if str(temp) in " ".join(p.info["cmdline"] or [])]
        for p in leftovers:
            p.kill()


def _ray_workers() -> list[psutil.Process]:
    """Processes running a Chord worker actor (Ray titles them ``ray::RayWorker…``)."""
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        text = " ".join(p.info["cmdline"] or []) + " " + (p.info["name"] or "")
        if "RayWorker" in text:
            out.append(p)
    return out


def test_a_batch_spreads_over_both_nodes_and_survives_a_killed_actor(ray_cluster, tmp_path):
    from chord_core.testing.videos import make_video

    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(6):
        make_video(clips / f"c{i}.mp4", duration_s=1.0, fps=4.0, size_wh=(96, 64), seed=i)
    out, data = tmp_path / "out", tmp_path / "data"
    cmd = [sys.executable, "-m", "chord_core", "batch", str(clips), "--task", "ground",
           "--query", "the square", "--out", str(out), "--model", "test", "--cpu-workers", "2",
           "--executor", "ray", "--ray-address", ray_cluster, "--fps", "4", "-q"]
    env = {**_env(), "CHORD_DATA_DIR": str(data)}
    run = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    killed = None
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:
        done = list(out.glob("c*.json")) if out.exists() else []
        workers = _ray_workers()
        if killed is None and done and len(workers) == 2 and len(done) < 6:
            killed = workers[0]
            killed.send_signal(signal.SIGKILL)  # the actor's process dies mid-batch
        time.sleep(0.2)
    stderr = run.communicate(timeout=60)[1]
    assert run.returncode == 0, stderr[-3000:]
    assert killed is not None, "the batch finished before an actor could be killed"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"] == {"done": 6}
    assert sorted(p.name for p in out.glob("c*.json")) == [f"c{i}.ground.json" for i in range(6)]
    assert len(set(summary["nodes"].values())) == 2, summary["nodes"]  # both nodes worked
    db = sqlite3.connect(data / "chord.sqlite3")
    # the clips' jobs (children of the batch's own row)
    rows = db.execute("SELECT key, state FROM jobs WHERE parent IS NOT NULL").fetchall()
    assert len(rows) == 6 and {s for _, s in rows} == {"done"}
    assert len({k for k, _ in rows}) == 6  # one job per clip: nothing done twice
    assert db.execute("SELECT COUNT(*) FROM jobs WHERE parent IS NULL").fetchone()[0] == 1
    assert "died" in stderr or "ended" in stderr or "restart" in stderr.lower()


def _png(w: int = 64, h: int = 48) -> str:
    import numpy as np
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_the_service_answers_through_ray(ray_cluster, tmp_path):
    port = _free_port()
    env = {**_env(), "CHORD_DATA_DIR": str(tmp_path / "data")}
    server = subprocess.Popen(
        [sys.executable, "-m", "chord_core", "serve", "--port", str(port), "--model", "test",
         "--cpu-workers", "1", "--executor", "ray", "--ray-address", ray_cluster],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        while True:
            assert server.poll() is None, server.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the service did not become ready"
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(1)
        body = json.dumps({"tasks": [{"image_data": _png(), "text": "a grey picture"},
                                     {"image_data": "not base64 !", "text": "x"}]}).encode()
        req = urllib.request.Request(f"{url}/batch_predict", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            doc = json.loads(r.read())
        first, second = doc["predictions"]
        assert first["id"] == 0 and first["entailment"] in ("yes", "no", "maybe")
        assert 0.0 <= first["confidence"] <= 1.0
        assert second["id"] == 1 and second.get("error")
        with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
            health = json.loads(r.read())
        assert health["workers"][0]["worker"].startswith("ray-")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
