"""Alert hooks through a real ``watch`` process and a real hook script: the hook gets a
minimal environment (not the API key Chord was started with), runs off the watcher's
thread (a hook stuck for 40 s does not hold the next alert back; it is killed at
``--hook-timeout``), and each run — exit status, time, the first lines of its output and
stderr — is recorded where ``watch`` prints it and ``GET /v1/alerts`` returns it.

The one thing faked is the scorer at the model boundary, in the ``watch`` process and its
worker (``tests/e2e/fake_scorer_site``: the green square in the left third "entails" the
statement). Both clips start with the square at the left: each fires one alert."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
FAKE_SITE = ROOT / "tests" / "e2e" / "fake_scorer_site"
STATEMENT = "the green square is on the left"
HOOK = '''
import json, os, sys, time
alert = json.load(sys.stdin)
out = os.environ["HOOK_OUT"] if "HOOK_OUT" in os.environ else sys.argv[1]
first = not os.path.exists(out + ".first")
with open(out + f".env{alert['id']}", "w") as fh:
    json.dump(dict(os.environ), fh)
if first:
    open(out + ".first", "w").close()
    print("paging the guard", flush=True)
    time.sleep(40)
print(f"second alert {alert['id']}")
print("the pager is down", file=sys.stderr)
sys.exit(3)
'''


def test_hooks_run_apart_with_a_minimal_environment_and_every_run_is_recorded(tmp_path):
    media, data = tmp_path / "media", tmp_path / "data"
    folder = media / "yard"
    folder.mkdir(parents=True)
    for name, seed in (("gate.mp4", 1), ("dock.mp4", 2)):
        make_video(folder / name, duration_s=2.0, fps=5.0, size_wh=(192, 108), seed=seed)
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK)
    out = tmp_path / "hook-out"
    env = dict(os.environ, CHORD_MEDIA_ROOTS=str(media), CHORD_DATA_DIR=str(data),
               CHORD_API_KEY="s3cret-key-for-the-service",
               PYTHONPATH=os.pathsep.join([str(FAKE_SITE), str(ROOT)]))
    done = subprocess.run(
        [sys.executable, "-m", "chord_core", "watch", str(folder), "--once", "--settle-s",
         "0", "--model", "test", "--cpu-workers", "1", "--max-new-tokens", "4",
         "--statement", STATEMENT, "--hook", f"{sys.executable} {hook} {out}",
         "--hook-timeout", "8"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(data / "chord.sqlite3") as conn:
        conn.row_factory = sqlite3.Row
        alerts = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM library_alerts")}
        runs = {r["alert_id"]: dict(r) for r in conn.execute("SELECT * FROM library_hook_runs")}
    assert len(alerts) == 2 and set(runs) == set(alerts), (alerts, runs, done.stderr[-3000:])
    slow = next(r for r in runs.values() if r["outcome"].startswith("timed out"))
    fast = next(r for r in runs.values() if r is not slow)
    # the stuck hook: killed at the timeout, its first line kept
    assert slow["outcome"] == "timed out after 8 s (killed)" and slow["exit_code"] is None
    assert 7.5 < slow["duration_s"] < 20 and slow["output"] == "paging the guard"
    # the other: its exit status, stdout and stderr, on the alert too
    assert (fast["exit_code"], fast["outcome"]) == (3, "exit 3")
    assert fast["output"] == (f"second alert {fast['alert_id']}\n"
                              "stderr: the pager is down")
    assert alerts[fast["alert_id"]]["hook"] == "exit 3"
    # off the watcher's path: the second alert was stored while the stuck hook still ran
    other = alerts[fast["alert_id"]]
    assert other["created_at"] < slow["started_at"] + slow["duration_s"] - 1, (other, slow)
    # a minimal environment: no API key, nothing of Chord's, only what a command needs
    for alert_id in alerts:
        hook_env = json.loads(Path(f"{out}.env{alert_id}").read_text())
        assert "CHORD_API_KEY" not in hook_env and "PYTHONPATH" not in hook_env
        assert set(hook_env) <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR",
                                 "CHORD_ALERT_ID", "CHORD_ALERT_WATCH", "LC_CTYPE"}, hook_env
        assert hook_env["CHORD_ALERT_ID"] == str(alert_id)
    # watch says each run where its user looks
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("hook for alert")]
    assert sorted(lines) == sorted([
        f"hook for alert {slow['alert_id']}: timed out after 8 s (killed) in "
        f"{slow['duration_s']:.1f} s: paging the guard",
        f"hook for alert {fast['alert_id']}: exit 3 in {fast['duration_s']:.1f} s: "
        f"second alert {fast['alert_id']}"]), done.stderr[-3000:]
    _alerts_api_shows_the_runs(data, runs)


def _alerts_api_shows_the_runs(data: Path, runs: dict) -> None:  # noqa: ANN001
    """``GET /v1/alerts`` (the service's route over the same store) carries each run."""
    from fastapi.testclient import TestClient

    from chord_core.runtime.store import Store
    from chord_core.service.app import create_app
    from chord_core.service.runtime import ServiceRuntime
    from chord_core.service.settings import ServiceSettings

    with Store(data / "chord.sqlite3") as store:
        app = create_app(ServiceRuntime(manager=None, store=store), ServiceSettings())
        with TestClient(app, base_url="http://127.0.0.1") as client:  # a local Host
            got = client.get("/v1/alerts").json()["alerts"]
    assert {a["id"]: a["hook_run"]["outcome"] for a in got} == {
        k: r["outcome"] for k, r in runs.items()}
