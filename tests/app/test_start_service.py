"""start_service.sh: documents itself, rejects bad options, and really serves the app."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "start_service.sh"


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_help_documents_the_options() -> None:
    out = _run("--help")
    assert out.returncode == 0
    for word in ("--host", "--port", "--model", "--no-install", "CHORD_HOST", "CHORD_PORT",
                 "0.0.0.0", "localhost", "8501"):
        assert word in out.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--bogus"], "unknown option: --bogus"),
    (["--port", "http"], "port must be a number"),
    (["--port", "70000"], "port must be a number"),
], ids=["unknown-option", "non-numeric-port", "port-out-of-range"])
def test_bad_options_exit_2(args: list[str], message: str) -> None:
    out = _run(*args)
    assert out.returncode == 2
    assert message in out.stderr


@pytest.mark.slow
def test_serves_health_on_the_given_port(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, CHORD_MODEL="test", CHORD_DATA_DIR=str(tmp_path / "data"),
               PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    proc = subprocess.Popen(["bash", str(SCRIPT), "--no-install", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as r:
                    assert r.read() == b"ok"
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "no answer on /_stcore/health"
                time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_gpus_flag_selects_the_apps_gpus_and_sets_thread_defaults() -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "CUDA_DEVICE_ORDER", "CHORD_GPUS")}
    out = subprocess.run(["bash", str(SCRIPT), "--gpus", "1", "--dry-run"], capture_output=True,
                         text=True, timeout=30, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "CHORD_GPUS=1" in lines and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in lines
    threads = [int(line.split("=")[1]) for line in lines if line.startswith("OMP_NUM_THREADS=")]
    assert threads and 1 <= threads[0] <= 8
    assert "streamlit run app.py" in lines[-1]
    kept = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True,
                          timeout=30, cwd=ROOT, env={**env, "OMP_NUM_THREADS": "3"})
    assert "OMP_NUM_THREADS=3" in kept.stdout.splitlines()  # a user's choice is kept


def test_gpus_flag_rejects_a_bad_list() -> None:
    out = _run("--gpus", "first")
    assert out.returncode == 2 and "--gpus must list GPU numbers" in out.stderr
