"""Time left of a long run, from the measured pace of its finished chunks.

What misled before (issue 39: "6:08 left" for 1:30 of work, then frozen between chunks): the
rate was the time since the run began over the chunks done, so the first chunk's wait for
a worker and its model load counted as chunk work, and the figure was only written when a
chunk finished, so the page showed the same number for a whole chunk.

Now the pace is the chunks' own: each finished chunk says when it finished and how long its
work took (its result's ``total_s`` less ``load_s``); the run's work began when its first
chunk began working (finished − work), and the pace is (last finish − that start) / chunks
finished in this run. That holds with several chunks in flight at once (two workers finish
two chunks per chunk time: the pace halves). The progress document carries the estimate,
the wall time it was made at, and the pace (``eta_s``, ``eta_at``, ``chunk_s``), and
``left_now`` counts it down with the clock between finishes — down to the estimate for the
chunks after the one due (it holds there while that chunk runs late), never below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass
class ChunkPace:
    """The finished chunks of one run (this process's; resumed chunks are not timed)."""

    total: int
    resumed: int = 0
    began_at: float | None = None  # wall time the run's first timed chunk began its work
    last_at: float | None = None  # wall time the latest chunk finished
    ran: int = 0

    def finished(self, at: float, work_s: float) -> None:
        """A chunk finished at ``at`` (wall seconds) after ``work_s`` seconds of work."""
        began = at - max(0.0, float(work_s))
        self.began_at = began if self.began_at is None else min(self.began_at, began)
        self.last_at = at if self.last_at is None else max(self.last_at, at)
        self.ran += 1

    def chunk_s(self) -> float | None:
        """Seconds of the run's time per chunk, as measured so far; None before a finish."""
        if self.ran <= 0 or self.began_at is None or self.last_at is None:
            return None
        return max(0.0, self.last_at - self.began_at) / self.ran

    def estimate(self, done: int) -> dict[str, Any]:
        """``eta_s`` (seconds left when the latest chunk finished), ``eta_at`` (that wall
        time) and ``chunk_s`` (the pace), for the run's progress document."""
        pace = self.chunk_s()
        if pace is None or self.last_at is None:
            return {"eta_s": None, "eta_at": None, "chunk_s": None}
        left = max(0, self.total - done)
        return {"eta_s": round(pace * left, 3), "eta_at": round(self.last_at, 3),
                "chunk_s": round(pace, 3)}


def work_seconds(result: Any) -> float:
    """A chunk's own work: its result's total time less the model's loading."""
    timing = getattr(result, "timing", None)
    if timing is None:
        return 0.0
    return max(0.0, float(timing.total_s) - float(timing.load_s))


def left_now(progress: Mapping[str, Any], now: float) -> float | None:
    """Seconds left at wall time ``now``: the estimate counted down since it was made, held
    at the estimate for the chunks after the one due while that one runs late; None when
    nothing can be said (no chunk finished yet, or only the late last one is left)."""
    eta = progress.get("eta_s")
    if eta is None:
        return None
    at, pace = progress.get("eta_at"), progress.get("chunk_s")
    if at is None or pace is None:  # a document of an older run: its figure as it is
        return float(eta)
    counted = float(eta) - max(0.0, now - float(at))
    left = max(counted, float(eta) - float(pace))
    return left if left >= 1.0 else None
