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


def _start_pair(tmp_path: Path, host: str, env_drop: tuple[str, ...] = ()
                ) -> tuple[subprocess.Popen, int, int]:
    """start_service.sh with the app and the service on free ports, in its own session."""
    app_port, api_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    env.update(CHORD_MODEL="test", CHORD_DATA_DIR=str(tmp_path / "data"), CHORD_CPU_WORKERS="1",
               PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}")
    proc = subprocess.Popen(["bash", str(SCRIPT), "--no-install", "--host", host,
                             "--port", str(app_port), "--api-port", str(api_port)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    return proc, app_port, api_port


def _child(proc: subprocess.Popen, word: str) -> int:
    """The pid of the script's direct child whose command line holds ``word``."""
    import psutil

    for child in psutil.Process(proc.pid).children():
        if word in " ".join(child.cmdline()):
            return child.pid
    raise AssertionError(f"no child running {word}")


@pytest.mark.slow
@pytest.mark.parametrize(("victim", "other"), [("chord_core", "app"), ("streamlit", "api")],
                         ids=["api-killed", "app-killed"])
def test_a_killed_child_stops_the_whole_unit_non_zero(tiny_model_dir, tmp_path, victim,
                                                      other) -> None:
    """Supervision: SIGKILL to one child (no chance to clean up) → the script stops the other
    and exits non-zero within seconds, so a container's restart policy sees a failure."""
    proc, app_port, api_port = _start_pair(tmp_path, "127.0.0.1")
    try:
        deadline = time.monotonic() + 90
        while not (_get(f"http://127.0.0.1:{app_port}/_stcore/health") == 200
                   and _get(f"http://127.0.0.1:{api_port}/health") in (200, 503)):
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "app and service did not both answer in 90 s"
            time.sleep(0.5)
        os.kill(_child(proc, victim), signal.SIGKILL)
        t0 = time.monotonic()
        rc = proc.wait(20)
        assert time.monotonic() - t0 < 15
        assert rc == 128 + signal.SIGKILL, rc
        err = proc.stderr.read()
        assert "exited with status 137" in err and "stopping the other" in err
        other_url = {"app": f"http://127.0.0.1:{app_port}/_stcore/health",
                     "api": f"http://127.0.0.1:{api_port}/health"}[other]
        assert _get(other_url) == 0, f"the {other} still answers after the unit exited"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_service_that_refuses_to_start_stops_the_unit(tmp_path) -> None:
    """0.0.0.0 without CHORD_API_KEY: the service refuses at start, and the app it was started
    beside does not stay up alone (the old script checked once after a 2 s sleep)."""
    proc, app_port, _ = _start_pair(tmp_path, "0.0.0.0",
                                    env_drop=("CHORD_API_KEY", "CHORD_API_NO_AUTH"))
    try:
        rc = proc.wait(60)
        err = proc.stderr.read()
        assert rc != 0 and "without an API key" in err, (rc, err)
        assert "the HTTP service (chord_core serve) exited" in err
        assert _get(f"http://127.0.0.1:{app_port}/_stcore/health") == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
