"""GPU and host telemetry: one NVML owner and one background sampler for the whole process.

``Nvml`` owns the NVIDIA Management Library (through nvidia-ml-py, imported lazily): it starts
NVML once, on first use, and turns every query a device does not support (or that we may not
make) into ``None`` for that field instead of an error. When NVML cannot be used at all,
``available`` is False and ``reason`` says why, so pages can show it instead of failing.

``GpuSampler`` runs ONE daemon thread that takes a GPU snapshot (one NVML pass) and a CPU/RAM
snapshot (psutil, always, so machines without NVIDIA still get charts) every ``interval_s``,
keeps ``history_s`` seconds of both, and hands each GPU snapshot to subscribers. Every reader
gets copies; samples are frozen dataclasses. ``shared_sampler()`` is the process-wide one that
all Streamlit sessions share.

NVML index vs CUDA ordinal: NVML numbers GPUs in PCI bus order and ignores
``CUDA_VISIBLE_DEVICES``; CUDA numbers only the visible ones, in the listed order. Each sample
carries both (``index`` and ``cuda_ordinal``, None when hidden from CUDA in this process).
CUDA's own order matches NVML's only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or identical GPUs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Callable, Literal, Sequence

from chord_core.errors import ConfigError

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
_FROM_ENV = "<from-env>"  # default for Nvml(visible_devices=...): read CUDA_VISIBLE_DEVICES at init

REASON_NO_PYNVML = "nvidia-ml-py not installed (pip install nvidia-ml-py)"
REASON_NO_GPU = "no NVIDIA GPU found"

# Short names accepted by ``sample["..."]`` besides the field names themselves.
_ALIASES = {
    "utilization": "utilization_pct", "memory_used": "memory_used_mib",
    "memory_total": "memory_total_mib", "temperature": "temperature_c", "power": "power_w",
    "power_limit": "power_limit_w", "cpu": "cpu_pct", "ram_used": "ram_used_mib",
    "ram_total": "ram_total_mib",
}


class _ItemAccess:
    """``sample["utilization"]`` as well as ``sample.utilization_pct`` (for table-like callers)."""

    def __getitem__(self, key: str) -> Any:
        name = _ALIASES.get(key, key)
        known = {f.name for f in fields(self)} | {"memory_pct", "ram_pct"}  # type: ignore[arg-type]
        if name not in known or not hasattr(self, name):
            raise KeyError(key)
        return getattr(self, name)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


@dataclass(frozen=True)
class ProcessInfo:
    """A process holding memory on a GPU. ``pid`` is as NVML sees it (the host's PID namespace)."""

    pid: int
    used_memory_mib: float | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuSample(_ItemAccess):
    """One GPU at one moment. Any reading the device cannot give is None ("not available")."""

    t: float
    index: int
    cuda_ordinal: int | None
    name: str
    uuid: str
    utilization_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    processes: tuple[ProcessInfo, ...] = ()
    job: str | None = None

    @property
    def memory_pct(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return 100.0 * self.memory_used_mib / self.memory_total_mib

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["processes"] = [p.to_dict() for p in self.processes]
        data["memory_pct"] = self.memory_pct
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuSample:
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["processes"] = tuple(ProcessInfo(**p) for p in data.get("processes", ()))
        return cls(**kwargs)


@dataclass(frozen=True)
class SystemSample(_ItemAccess):
    """Host CPU and RAM at one moment. ``cpu_pct`` is None when no interval could be measured."""

    t: float
    cpu_pct: float | None
    ram_used_mib: float
    ram_total_mib: float

    @property
    def ram_pct(self) -> float | None:
        return 100.0 * self.ram_used_mib / self.ram_total_mib if self.ram_total_mib else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ram_pct"] = self.ram_pct
        return data


# --------------------------------------------------------------------------- CUDA ordinals


def cuda_ordinals(visible: str | None, uuids: Sequence[str]) -> dict[int, int | None]:
    """Map each NVML index (position in ``uuids``) to its CUDA ordinal, or None if hidden.

    ``visible`` is a ``CUDA_VISIBLE_DEVICES`` value (None = unset: every GPU, same order).
    Entries are NVML indices or (possibly abbreviated) ``GPU-`` UUIDs. As CUDA does, parsing
    stops at the first invalid entry (out of range, unknown or ambiguous UUID, negative, a
    switch between indices and UUIDs), and a device listed twice makes no GPU visible.
    MIG entries are not resolved (treated as invalid).
    """
    if visible is None:
        return {i: i for i in range(len(uuids))}
    result: dict[int, int | None] = {i: None for i in range(len(uuids))}
    for ordinal, nvml_index in enumerate(_visible_indices(visible, uuids)):
        result[nvml_index] = ordinal
    return result


def _visible_indices(visible: str, uuids: Sequence[str]) -> list[int]:
    chosen: list[int] = []
    kind: str | None = None
    for entry in visible.split(","):
        index, entry_kind = _resolve_entry(entry.strip(), uuids)
        if index is None or (kind is not None and entry_kind != kind):
            break
        if index in chosen:
            return []
        kind = entry_kind
        chosen.append(index)
    return chosen


def _resolve_entry(entry: str, uuids: Sequence[str]) -> tuple[int | None, str]:
    digits = re.match(r"\d+", entry)
    if digits:  # CUDA reads the leading integer ("1abc" → 1)
        n = int(digits.group())
        return (n if n < len(uuids) else None), "index"
    if entry.upper().startswith("GPU-") and len(entry) > 4:
        prefix = entry.lower()
        matches = [i for i, u in enumerate(uuids) if u.lower().startswith(prefix)]
        return (matches[0] if len(matches) == 1 else None), "uuid"
    return None, "invalid"


# --------------------------------------------------------------------------- NVML owner


@dataclass(frozen=True)
class _Device:
    index: int
    handle: Any
    name: str
    uuid: str


def _text(value: Any) -> str:
    """NVML strings arrive as bytes in older nvidia-ml-py releases and str in newer ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return "" if value is None else str(value)


def _scaled(value: Any, divisor: float) -> float | None:
    return None if value is None else float(value) / divisor


class Nvml:
    """The single owner of NVML in this process: lazy, thread-safe, never raises on a query.

    ``visible_devices`` overrides ``CUDA_VISIBLE_DEVICES`` (read at first use otherwise); pass
    None to treat it as unset.
    """

    def __init__(self, visible_devices: str | None = _FROM_ENV) -> None:
        self._visible = visible_devices
        self._lock = threading.RLock()
        self._tried = False
        self._nv: Any = None  # the pynvml module once NVML is initialised
        self._devices: list[_Device] = []
        self._ordinals: dict[int, int | None] = {}
        self._reason = ""
        self._logged: set[tuple[str, str]] = set()
        self._proc_names: dict[int, str | None] = {}

    # -- state
    @property
    def available(self) -> bool:
        """True when NVML started and found at least one GPU."""
        return self._ensure()

    @property
    def reason(self) -> str:
        """Why NVML is unavailable ('' when it is available)."""
        self._ensure()
        return self._reason

    def device_count(self) -> int:
        return len(self._devices) if self._ensure() else 0

    def cuda_ordinal_map(self) -> dict[int, int | None]:
        """NVML index → CUDA ordinal in this process (None: hidden by CUDA_VISIBLE_DEVICES)."""
        self._ensure()
        return dict(self._ordinals)

    def close(self) -> None:
        """Shut NVML down; the next query starts it again."""
        with self._lock:
            if self._nv is not None:
                self._query("nvmlShutdown")
            self._nv, self._devices, self._ordinals, self._tried = None, [], {}, False

    # -- init
    def _ensure(self) -> bool:
        with self._lock:
            if not self._tried:
                self._tried = True
                self._init()
            return self._nv is not None and bool(self._devices)

    def _init(self) -> None:
        try:
            import pynvml
        except ImportError:
            self._reason = REASON_NO_PYNVML
            logger.info("GPU telemetry off: %s", self._reason)
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            self._reason = f"NVML could not initialise: {err} (no NVIDIA driver?)"
            logger.info("GPU telemetry off: %s", self._reason)
            return
        self._nv = pynvml
        count = self._query("nvmlDeviceGetCount") or 0
        uuids = [self._open_device(i) for i in range(count)]
        if not self._devices:
            self._reason = REASON_NO_GPU
            self._query("nvmlShutdown")
            self._nv = None
            logger.info("GPU telemetry off: %s", self._reason)
            return
        visible = self._visible
        if visible == _FROM_ENV:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._ordinals = cuda_ordinals(visible, uuids)
        self._reason = ""
        logger.info("NVML started: %d GPU(s), CUDA ordinals %s", len(self._devices), self._ordinals)

    def _open_device(self, index: int) -> str:
        """Cache the handle, name and UUID of one GPU; returns its UUID ('' if unusable)."""
        handle = self._query("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            logger.warning("NVML GPU %d cannot be opened; it is left out of telemetry", index)
            return ""
        uuid = _text(self._query("nvmlDeviceGetUUID", handle))
        name = _text(self._query("nvmlDeviceGetName", handle)) or f"GPU {index}"
        self._devices.append(_Device(index=index, handle=handle, name=name, uuid=uuid))
        return uuid

    # -- queries
    def _query(self, func: str, *args: Any) -> Any:
        """Call ``pynvml.<func>``; any NVMLError (not supported, no permission, GPU lost...)
        becomes None, logged once per function and error kind."""
        fn = getattr(self._nv, func, None)
        if fn is None:
            self._log_once(func, "missing from this nvidia-ml-py", logging.INFO)
            return None
        try:
            return fn(*args)
        except self._nv.NVMLError as err:
            unsupported = isinstance(err, getattr(self._nv, "NVMLError_NotSupported", ()))
            self._log_once(func, f"{type(err).__name__}: {err}",
                           logging.DEBUG if unsupported else logging.WARNING)
            return None

    def _log_once(self, func: str, what: str, level: int) -> None:
        key = (func, what)
        if key not in self._logged:
            self._logged.add(key)
            logger.log(level, "NVML %s: %s (reported as not available)", func, what)

    def sample_all(self, t: float | None = None) -> list[GpuSample]:
        """One snapshot of every GPU (empty list when NVML is unavailable)."""
        t = time.time() if t is None else t
        with self._lock:  # close() cannot slip in between the check and the pass
            if not self._ensure():
                return []
            return [self._sample(dev, t) for dev in self._devices]

    def _sample(self, dev: _Device, t: float) -> GpuSample:
        h = dev.handle
        util = self._query("nvmlDeviceGetUtilizationRates", h)
        mem = self._query("nvmlDeviceGetMemoryInfo", h)
        sensor = getattr(self._nv, "NVML_TEMPERATURE_GPU", 0)
        return GpuSample(
            t=t, index=dev.index, cuda_ordinal=self._ordinals.get(dev.index),
            name=dev.name, uuid=dev.uuid,
            utilization_pct=_scaled(getattr(util, "gpu", None), 1),
            memory_used_mib=_scaled(getattr(mem, "used", None), MIB),
            memory_total_mib=_scaled(getattr(mem, "total", None), MIB),
            temperature_c=_scaled(self._query("nvmlDeviceGetTemperature", h, sensor), 1),
            power_w=_scaled(self._query("nvmlDeviceGetPowerUsage", h), 1000),
            power_limit_w=_scaled(self._query("nvmlDeviceGetEnforcedPowerLimit", h), 1000),
            processes=self._processes(h),
        )

    def _processes(self, handle: Any) -> tuple[ProcessInfo, ...]:
        procs = self._query("nvmlDeviceGetComputeRunningProcesses", handle) or []
        return tuple(
            ProcessInfo(pid=int(p.pid),
                        used_memory_mib=_scaled(getattr(p, "usedGpuMemory", None), MIB),
                        name=self._process_name(int(p.pid)))
            for p in procs
        )

    def _process_name(self, pid: int) -> str | None:
        """Executable name via NVML, cached per PID (None when NVML cannot see it, e.g. in a
        container whose PID namespace differs from the driver's)."""
        if pid not in self._proc_names:
            if len(self._proc_names) > 1024:
                self._proc_names.clear()
            raw = _text(self._query("nvmlSystemGetProcessName", pid))
            self._proc_names[pid] = os.path.basename(raw) or None
        return self._proc_names[pid]


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
