"""Load balancing: how much a job costs, which worker gets it, how a long job is split.

Cost is counted in prefill-token equivalents: a request costs its visual tokens plus each token
it may generate weighted by ``DECODE_WEIGHT`` (one decode step at batch 1 costs about as much
GPU time as prefilling a few dozen tokens). Each worker has a speed: its configured weight
(``gpu_weights``, for heterogeneous cards) times a correction learned from measured throughput
(cost per busy second, smoothed). A task goes to the worker that would finish it first:
argmin over workers of (backlog + cost) / speed. A grounding job is split into contiguous frame
ranges in proportion to speed, so all replicas finish together.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Sequence

from chord_core.types import SamplingPlan, VideoInfo

DECODE_WEIGHT = 24.0
GROUND_TOKENS_PER_FRAME = 48
EMA = 0.3


def plan_cost(plan: SamplingPlan, max_new_tokens: int) -> float:
    """Cost of running ``plan``: describe is one request; ground is one request per frame."""
    if plan.task == "ground":
        return plan.visual_tokens + DECODE_WEIGHT * GROUND_TOKENS_PER_FRAME * plan.num_frames
    if plan.task == "entail":  # one prefill per frame, nothing decoded
        return float(plan.visual_tokens)
    return plan.visual_tokens + DECODE_WEIGHT * max_new_tokens


def legacy_cost(video: VideoInfo) -> float:
    """The original design documents' estimate: duration × megapixels × (fps / 30)."""
    return video.duration_s * (video.width * video.height / 1e6) * (video.fps / 30.0)


@dataclass
class _WorkerLoad:
    weight: float
    correction: float = 1.0
    backlog: float = 0.0
    busy_s: float = 0.0
    done_cost: float = 0.0

    @property
    def speed(self) -> float:
        return max(1e-6, self.weight * self.correction)


class Balancer:
    """Least-expected-finish-time assignment with throughput correction. Thread-safe."""

    def __init__(self, weights: dict[str, float], *, ema: float = EMA) -> None:
        self._lock = threading.Lock()
        self._w = {wid: _WorkerLoad(max(1e-3, float(w))) for wid, w in weights.items()}
        self.ema = ema
        self.check_interval_s = 0.0  # corrections are recomputed at most this often
        self.max_correction = 0.0  # 0 = unbounded; else corrections stay in 1 ± this
        self._last_check = 0.0

    def set_adjustment(self, factor: float, *, check_interval_s: float = 0.0,
                       max_correction: float = 0.0) -> None:
        """How fast measured throughput corrects the speeds (0 = weights only), how often
        (seconds between corrections) and how far (a correction stays within
        1 ± ``max_correction``; 0 = no bound)."""
        with self._lock:
            self.ema = max(0.0, min(1.0, factor))
            self.check_interval_s = max(0.0, float(check_interval_s))
            self.max_correction = max(0.0, float(max_correction))
            self._last_check = time.monotonic()
            if self.ema == 0.0:
                for w in self._w.values():
                    w.correction = 1.0

    def set_weights(self, weights: dict[str, float]) -> None:
        """New configured shares for some workers (the learned corrections are kept)."""
        with self._lock:
            for wid, weight in weights.items():
                if wid in self._w:
                    self._w[wid].weight = max(1e-3, float(weight))

    def weights(self) -> dict[str, float]:
        with self._lock:
            return {wid: w.weight for wid, w in self._w.items()}

    def speeds(self) -> dict[str, float]:
        with self._lock:
            return {wid: w.speed for wid, w in self._w.items()}

    def choose(self, cost: float, candidates: Sequence[str] | None = None) -> str:
        """Pick the worker for a task of ``cost`` and add it to that worker's backlog."""
        with self._lock:
            ids = [c for c in (candidates or list(self._w)) if c in self._w]
            if not ids:
                raise ValueError("no worker to choose from")
            best = min(ids, key=lambda wid: ((self._w[wid].backlog + cost) / self._w[wid].speed,
                                             wid))
            self._w[best].backlog += cost
            return best

    def move(self, cost: float, src: str, dst: str) -> None:
        """A queued task moved between workers (work stealing, or a restart)."""
        with self._lock:
            self._w[src].backlog = max(0.0, self._w[src].backlog - cost)
            self._w[dst].backlog += cost

    def finished(self, worker_id: str, cost: float, busy_s: float) -> None:
        """Record a finished task: backlog shrinks, measured throughput corrects the speed."""
        with self._lock:
            w = self._w[worker_id]
            w.backlog = max(0.0, w.backlog - cost)
            if busy_s <= 0 or self.ema == 0.0:
                return
            w.busy_s += busy_s
            w.done_cost += cost
            now = time.monotonic()
            if now - self._last_check < self.check_interval_s:
                return  # measured, applied at the next check
            self._last_check = now
            self._correct()

    def _correct(self) -> None:
        rates = {wid: x.done_cost / x.busy_s for wid, x in self._w.items() if x.busy_s > 0}
        mean_rate_per_weight = sum(r / self._w[wid].weight for wid, r in rates.items()) \
            / len(rates)
        bound = self.max_correction
        for wid, rate in rates.items():
            x = self._w[wid]
            target = (rate / x.weight) / mean_rate_per_weight
            x.correction = (1 - self.ema) * x.correction + self.ema * target
            if bound > 0:
                x.correction = min(1 + bound, max(max(1e-3, 1 - bound), x.correction))

    def split(self, n_items: int, workers: Sequence[str], *, align: int = 1
              ) -> list[tuple[str, int, int]]:
        """Contiguous ranges [start, end) of ``n_items`` per worker, sized by speed.
        Boundaries fall on multiples of ``align`` (the batch size) where possible, so every
        batch has the same composition as on a single worker (same kernels, same numerics)
        and no worker runs an extra, half-empty batch."""
        speeds = self.speeds()
        workers = [w for w in workers if w in speeds]
        total = sum(speeds[w] for w in workers)
        align = max(1, align) if n_items >= align * len(workers) else 1
        out, start, acc = [], 0, 0.0
        for i, wid in enumerate(workers):
            acc += speeds[wid]
            end = n_items if i == len(workers) - 1 else \
                min(n_items, align * round(n_items * acc / total / align))
            if end > start:
                out.append((wid, start, end))
            start = max(start, end)
        return out
