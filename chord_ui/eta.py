"""Time left for a running job, from the plan's whole cost.

What misled before: the rate of the *current* frame loop stood for the whole job, so the end
of decoding said "about 0.0 s left" just before 15 s of generation; the first guess of a
grounding loop came from two events a few frames apart (4:44.8 for about 2:15 of work); and
the figure froze between events (20 s apart on a busy worker).

Now: finished jobs teach the cost of one visual token of work (decode + prefill +
generation + post-processing, model loading left out) per model and task; a job's whole
cost is that rate × its plan's visual tokens. Once the last heavy stage (grounding's frame
loop) has measured its own rate over a few frames, that takes over. Between events the
figure counts down with the clock. Until one of the two is known — and when the job has
outrun its estimate — the page says "estimating", never a number it cannot stand behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from chord_core.types import ProgressEvent

# the stage whose loop is the job's last heavy work, per task (describe's generation has no
# per-frame loop: its cost is only known from finished jobs)
LAST_LOOP = {"ground": "grounding_frames"}
MIN_LOOP_UNITS = 3  # a loop's rate from fewer finished units is noise
SETUP_STAGES = ("probe", "sampling", "loading_model")


@dataclass(frozen=True)
class Rate:
    """Seconds of work per visual token, learned from ``jobs`` finished jobs."""

    s_per_token: float
    jobs: int


def learn_rates(results: Iterable[dict[str, Any]]) -> dict[tuple[str, str], Rate]:
    """Per (model id, task): Σ work seconds / Σ visual tokens of complete results (partial
    ones stopped early and would teach a low cost)."""
    sums: dict[tuple[str, str], list[float]] = {}
    for doc in results:
        timing, sampling = doc.get("timing") or {}, doc.get("sampling") or {}
        tokens = float(sampling.get("visual_tokens") or 0)
        work = float(timing.get("total_s") or 0) - float(timing.get("load_s") or 0)
        if doc.get("partial") or tokens <= 0 or work <= 0:
            continue
        acc = sums.setdefault(((doc.get("model") or {}).get("id", ""), doc.get("task", "")),
                              [0.0, 0.0, 0])
        acc[0], acc[1], acc[2] = acc[0] + work, acc[1] + tokens, acc[2] + 1
    return {k: Rate(w / n, int(j)) for k, (w, n, j) in sums.items()}


def _loop_left(events: Sequence[ProgressEvent], task: str) -> float | None:
    """Seconds left by the last heavy loop's own rate, at its latest event."""
    stage = LAST_LOOP.get(task)
    loop = [e for e in events if e.stage == stage and e.total > 0]
    if not loop:
        return None
    first, last = loop[0], loop[-1]
    units, took = last.done - first.done, last.elapsed_s - first.elapsed_s
    if units < MIN_LOOP_UNITS or took <= 0:
        return None
    return (last.total - last.done) * took / units


def _work_elapsed(events: Sequence[ProgressEvent]) -> float:
    """Seconds of work so far, model loading left out (as in the learned rates)."""
    work = [e for e in events if e.stage not in SETUP_STAGES]
    return max(0.0, work[-1].elapsed_s - work[0].elapsed_s) if len(work) > 1 else 0.0


def left_at_event(events: Sequence[ProgressEvent], task: str, plan_tokens: int,
                  rate: Rate | None) -> float | None:
    """Seconds left as of the latest event; None while nothing can be said."""
    if not events or events[-1].stage in ("done",):
        return None
    loop = _loop_left(events, task)
    if loop is not None:
        return loop
    if rate is None or plan_tokens <= 0:
        return None
    left = rate.s_per_token * plan_tokens - _work_elapsed(events)
    return left if left > 0 else None  # outran the estimate: "estimating", not "0 s"


def counted_down(left_s: float | None, seen_at: float, now: float | None = None
                 ) -> float | None:
    """``left_s`` (as of the moment its event was first seen) minus the time since then;
    None once the clock has used it up (the job runs long: back to "estimating")."""
    if left_s is None:
        return None
    now = time.time() if now is None else now
    left = left_s - max(0.0, now - seen_at)
    return left if left >= 1.0 else None
