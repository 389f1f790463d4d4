"""start_service.sh --api-port: the service starts beside the app and stops with it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from service_server import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "start_service.sh"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=30, cwd=ROOT)


def test_dry_run_shows_the_service_command() -> None:
    out = _run("--dry-run", "--host", "127.0.0.1", "--api-port", "8088", "--api-gpus", "1")
    assert out.returncode == 0
    assert "-m chord_core serve --host 127.0.0.1 --port 8088 --gpus 1" in out.stdout
    assert "chord_core serve" not in _run("--dry-run").stdout


@pytest.mark.parametrize("args", [["--api-port", "web"], ["--api-port", "8501"],
                                  ["--api-port", "8088", "--api-gpus", "one"]],
                         ids=["non-numeric", "same-as-app", "bad-gpus"])
def test_bad_api_options_exit_2(args) -> None:
    out = _run("--dry-run", *args)
    assert out.returncode == 2 and out.stderr.startswith("error: --api-")


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.mark.slow
def test_app_and_service_start_together_and_stop_together(tiny_model_dir, tmp_path) -> None:
    app_port, api_port = free_port(), free_port()
    env = dict(os.environ, CHORD_MODEL="test", CHORD_DATA_DIR=str(tmp_path / "data"),
               PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    proc = subprocess.Popen(["bash", str(SCRIPT), "--no-install", "--host", "127.0.0.1",
                             "--port", str(app_port), "--api-port", str(api_port)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            app = _get(f"http://127.0.0.1:{app_port}/_stcore/health")
            api = _get(f"http://127.0.0.1:{api_port}/v1/models")
            if app == 200 and api == 200:
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.5)
        else:
            pytest.fail("app and service did not both answer within 90 s")
        proc.send_signal(signal.SIGTERM)  # stopping the script stops both
        proc.wait(30)
        time.sleep(0.5)
        assert _get(f"http://127.0.0.1:{api_port}/v1/models") == 0
        assert _get(f"http://127.0.0.1:{app_port}/_stcore/health") == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
