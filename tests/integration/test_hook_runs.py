"""An alert's hook run as a real process (``library.hooks.run_hook``), against hooks a
careless user writes: one that prints without end, one that leaves a process behind holding
its output (``setsid … &``: out of the group that is killed). Before, the first was held
whole in the watcher's memory and recorded whole (50 MB here), the second held the hooks'
thread until the left process ended (60 s here, past the hook's timeout). Now the output
kept is bounded and the run ends when the hook does."""

from __future__ import annotations

import os
import signal
import sys

from chord_core.library import hooks

ALERT = {"id": 7, "watch": "w-1", "statement": "a van parks", "path": "/media/clip.mp4"}


def test_a_hook_gets_the_alert_and_its_first_lines_are_recorded() -> None:
    script = ("import json, sys; a = json.load(sys.stdin); print('alert', a['id']); "
              "print('oops', file=sys.stderr); sys.exit(3)")
    run = hooks.run_hook(f"{sys.executable} -c \"{script}\"", ALERT, timeout_s=30)
    assert run.outcome == "exit 3" and run.exit_code == 3
    assert run.output == "alert 7\nstderr: oops"


def test_a_hook_that_prints_without_end_is_recorded_bounded() -> None:
    script = ("import sys; [sys.stdout.write('y' * 65536) for _ in range(800)]; "
              "[sys.stderr.write('e' * 65536) for _ in range(100)]")  # 50 MB, 6.4 MB
    run = hooks.run_hook(f"{sys.executable} -c \"{script}\"", ALERT, timeout_s=60)
    assert run.outcome == "exit 0", run.outcome
    assert len(run.output) <= hooks.OUTPUT_CHARS
    assert run.output.startswith("yyyy")


def test_a_process_the_hook_left_holding_its_output_does_not_hold_the_run() -> None:
    run = hooks.run_hook("sh -c 'setsid sleep 60 & echo $!; echo started'", ALERT,
                         timeout_s=30)
    left = int(run.output.split()[0]) if run.output.split()[0].isdigit() else 0
    try:
        assert run.outcome == "exit 0", run.outcome
        assert "started" in run.output
        assert run.duration_s < 20  # the hook's exit, and DRAIN_S for its output
    finally:
        if left:
            try:
                os.kill(left, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_hook_gets_a_minimal_environment_without_the_key(monkeypatch) -> None:
    monkeypatch.setenv("CHORD_API_KEY", "the-services-secret-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret")
    script = "import os; print(' '.join(sorted(os.environ)))"
    run = hooks.run_hook(f"{sys.executable} -c \"{script}\"", ALERT, timeout_s=30)
    assert run.outcome == "exit 0", run.output
    names = set(run.output.split())
    assert {"CHORD_ALERT_ID", "CHORD_ALERT_WATCH", "PATH"} <= names
    assert names <= {*hooks.KEPT_ENV, "CHORD_ALERT_ID", "CHORD_ALERT_WATCH", "LC_CTYPE"}, names
