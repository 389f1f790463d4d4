"""A grounding job split over workers reports its frames once: a finished share's last event
and its share's size are the same frames ("frame 24/16 on 2 workers" counted them twice)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chord_core.runtime.scheduling import job_event
from chord_core.types import ProgressEvent


def _task(state: str, share: int, done: int | None) -> SimpleNamespace:
    ev = None if done is None else ProgressEvent("grounding_frames", "", done, share, 1.0)
    return SimpleNamespace(state=state, last_event=ev,
                           task=SimpleNamespace(plan=SimpleNamespace(num_frames=share)))


@pytest.mark.parametrize(("tasks", "want"), [
    ({"a": _task("running", 8, 3), "b": _task("running", 8, 5)}, 8),
    ({"a": _task("done", 8, 8), "b": _task("running", 8, 8)}, 16),
    ({"a": _task("done", 8, 8), "b": _task("done", 8, 8)}, 16),
    ({"a": _task("done", 8, None), "b": _task("pending", 8, None)}, 8),
], ids=["both-running", "one-done", "both-done", "done-without-event"])
def test_split_job_counts_each_frame_once(tasks: dict, want: int) -> None:
    job = SimpleNamespace(tasks=list(tasks), plan=SimpleNamespace(num_frames=16), t0=0.0)
    ev = job_event(job, tasks, ProgressEvent("grounding_frames", "", 1, 8, 1.0))
    assert (ev.done, ev.total) == (want, 16)
    assert ev.message == f"frame {want}/16 on 2 workers"
