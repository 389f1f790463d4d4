"""GPU and host telemetry: one background sampler for the whole process.

``GpuSampler`` runs ONE daemon thread that takes a GPU snapshot (one NVML pass through
:class:`~chord_core.gpus.nvml.Nvml`) and a CPU/RAM snapshot (psutil, always, so machines without
NVIDIA still get charts) every ``interval_s``, keeps ``history_s`` seconds of both, and hands
each GPU snapshot to subscribers. Every reader gets copies; samples are frozen dataclasses.
``shared_sampler()`` is the process-wide one that all Streamlit sessions share.

The NVML owner, the sample records and the NVML-index → CUDA-ordinal mapping live in
:mod:`chord_core.gpus.nvml`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import replace
from typing import Callable, Literal

from chord_core.errors import ConfigError
from chord_core.gpus.nvml import (
    MIB,
    GpuSample,
    Nvml,
    SystemSample,
)

__all__ = ["GpuSampler", "Subscriber", "shared_sampler"]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- host CPU / RAM


def _system_sample(t: float) -> SystemSample:
    """CPU busy % since the previous call (psutil keeps that state) and RAM in use."""
    import psutil

    vm = psutil.virtual_memory()
    return SystemSample(t=t, cpu_pct=psutil.cpu_percent(interval=None),
                        ram_used_mib=(vm.total - vm.available) / MIB, ram_total_mib=vm.total / MIB)


# --------------------------------------------------------------------------- sampler

Subscriber = Callable[[list[GpuSample]], None]


class GpuSampler:
    """One background thread sampling GPUs (NVML) and host CPU/RAM (psutil).

    ``clock`` (unix seconds) is injectable for tests; ``nvml`` defaults to a new ``Nvml()``.
    """

    def __init__(self, interval_s: float = 1.0, history_s: float = 300.0, *,
                 nvml: Nvml | None = None, clock: Callable[[], float] = time.time) -> None:
        if not interval_s > 0 or not history_s >= interval_s:
            raise ConfigError(
                f"GPU sampler needs interval > 0 and history ≥ interval, got "
                f"interval {interval_s} s, history {history_s} s",
                hint="use e.g. interval_s=1.0, history_s=300.0")
        self.interval_s = float(interval_s)
        self.history_s = float(history_s)
        self._nvml = nvml if nvml is not None else Nvml()
        self._clock = clock
        import psutil

        psutil.cpu_percent(interval=None)  # the first reading only starts psutil's interval
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._cap = max(16, int(4 * history_s / interval_s))  # memory bound if the clock stalls
        self._latest: list[GpuSample] = []
        self._history: dict[int, deque[GpuSample]] = {}
        self._system: deque[SystemSample] = deque(maxlen=self._cap)
        self._subscribers: list[Subscriber] = []
        self._labels: dict[int, str] = {}

    # -- lifecycle
    @property
    def available(self) -> bool:
        return self._nvml.available

    @property
    def reason(self) -> str:
        return self._nvml.reason

    @property
    def nvml(self) -> Nvml:
        return self._nvml

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start the sampling thread (a no-op if it is already running)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop_event = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(self._stop_event,),
                                            name="chord-gpu-sampler", daemon=True)
            self._thread.start()
        logger.debug("GPU sampler started (every %.2f s)", self.interval_s)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait up to ``timeout`` seconds for it; history is kept."""
        with self._lock:
            thread, event, self._thread = self._thread, self._stop_event, None
        event.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self, stop: threading.Event) -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                self.sample_now()
            except Exception:  # noqa: BLE001 - the sampler must survive any one bad pass
                logger.exception("GPU sampler pass failed; trying again next interval")
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (suspend, slow NVML): do not burst to catch up
                next_at, delay = time.monotonic(), 0.0
            stop.wait(delay)

    # -- sampling
    def sample_now(self) -> list[GpuSample]:
        """Take one GPU + CPU/RAM sample now, record it, notify subscribers, return it."""
        t = self._clock()
        gpus = self._nvml.sample_all(t)
        system = _system_sample(t)
        with self._lock:
            gpus = [replace(s, job=self._labels[s.index]) if s.index in self._labels else s
                    for s in gpus]
            self._latest = gpus
            for s in gpus:
                self._history.setdefault(s.index, deque(maxlen=self._cap)).append(s)
            self._system.append(system)
            self._trim(t)
            subscribers = list(self._subscribers)
        for callback in subscribers:
            self._notify(callback, gpus)
        return list(gpus)

    def _trim(self, now: float) -> None:
        cutoff = now - self.history_s
        for index in list(self._history):
            ring = self._history[index]
            while ring and ring[0].t < cutoff:
                ring.popleft()
            if not ring:
                del self._history[index]
        while self._system and self._system[0].t < cutoff:
            self._system.popleft()

    @staticmethod
    def _notify(callback: Subscriber, gpus: list[GpuSample]) -> None:
        try:
            callback(list(gpus))
        except Exception:  # noqa: BLE001 - one subscriber must not stop sampling for all
            logger.exception("GPU sampler subscriber %r failed; it stays subscribed", callback)

    # -- reading (copies only)
    def latest(self) -> list[GpuSample]:
        with self._lock:
            return list(self._latest)

    def history(self) -> dict[int, list[GpuSample]]:
        """NVML index → samples of the last ``history_s`` seconds, oldest first."""
        with self._lock:
            return {index: list(ring) for index, ring in self._history.items()}

    def system_latest(self) -> SystemSample | None:
        with self._lock:
            return self._system[-1] if self._system else None

    def system_history(self) -> list[SystemSample]:
        with self._lock:
            return list(self._system)

    # -- subscribers
    def subscribe(self, callback: Subscriber) -> None:
        """Call ``callback(samples)`` from the sampler thread after every sample."""
        with self._lock:
            if callback not in self._subscribers:
                self._subscribers.append(callback)

    def unsubscribe(self, callback: Subscriber) -> bool:
        with self._lock:
            if callback in self._subscribers:
                self._subscribers.remove(callback)
                return True
            return False

    # -- job labels
    def set_job_label(self, gpu: int, label: str | None, *,
                      by: Literal["nvml", "cuda"] = "nvml") -> bool:
        """Mark which job runs on a GPU (None clears it); later samples carry it as ``job``.

        ``gpu`` is an NVML index, or with ``by="cuda"`` a CUDA ordinal of THIS process.
        Returns False (and logs) when a CUDA ordinal matches no GPU.
        """
        if by not in ("nvml", "cuda"):
            raise ValueError(f"by must be 'nvml' or 'cuda', got {by!r}")
        index: int | None = gpu
        if by == "cuda":
            index = next((i for i, o in self._nvml.cuda_ordinal_map().items() if o == gpu), None)
            if index is None:
                logger.warning("job label %r not set: no GPU has CUDA ordinal %d here", label, gpu)
                return False
        with self._lock:
            if label is None:
                self._labels.pop(index, None)
            else:
                self._labels[index] = label
        return True

    def job_labels(self) -> dict[int, str]:
        with self._lock:
            return dict(self._labels)


_shared: GpuSampler | None = None
_shared_lock = threading.Lock()


def shared_sampler(interval_s: float = 1.0, history_s: float = 300.0) -> GpuSampler:
    """The process-wide sampler, created and started on the first call; later calls return the
    same one (their arguments are ignored). The UI wraps this in ``st.cache_resource``."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = GpuSampler(interval_s=interval_s, history_s=history_s)
        sampler = _shared
    sampler.start()
    return sampler
