"""The NVML owner and the telemetry records it fills.

``Nvml`` owns the NVIDIA Management Library (through nvidia-ml-py, imported lazily): it starts
NVML once, on first use, and turns every query a device does not support (or that we may not
make) into ``None`` for that field instead of an error. When NVML cannot be used at all,
``available`` is False and ``reason`` says why, so pages can show it instead of failing.

Records: ``GpuSample`` (one GPU at one moment, with its ``ProcessInfo`` list) and
``SystemSample`` (host CPU/RAM, filled by :mod:`chord_core.gpus.sampler`); frozen dataclasses that also
answer ``sample["utilization"]``.

NVML index vs CUDA ordinal: NVML numbers GPUs in PCI bus order and ignores
``CUDA_VISIBLE_DEVICES``; CUDA numbers only the visible ones, in the listed order. Each sample
carries both (``index`` and ``cuda_ordinal``, None when hidden from CUDA in this process;
see :func:`cuda_ordinals`). CUDA's own order matches NVML's only with
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or identical GPUs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

from chord_core.config import env_value

__all__ = ["MIB", "REASON_NO_GPU", "REASON_NO_PYNVML", "GpuSample", "MigInstance", "Nvml",
           "ProcessInfo", "SystemSample", "cuda_ordinals"]

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


@dataclass(frozen=True)
class MigInstance:
    """One MIG instance of a GPU: its ``MIG-`` UUID, the NVML index of its GPU, its memory."""

    uuid: str
    gpu_index: int
    name: str
    memory_total_mib: float | None
    memory_used_mib: float | None


# --------------------------------------------------------------------------- CUDA ordinals


def cuda_ordinals(visible: str | None, uuids: Sequence[str],
                  mig_parents: Mapping[str, int] | None = None) -> dict[int, int | None]:
    """Map each NVML index (position in ``uuids``) to its CUDA ordinal, or None if hidden.

    ``visible`` is a ``CUDA_VISIBLE_DEVICES`` value (None = unset: every GPU, same order).
    Entries are NVML indices or (possibly abbreviated) ``GPU-`` UUIDs. As CUDA does, parsing
    stops at the first invalid entry (out of range, unknown or ambiguous UUID, negative, a
    switch between indices and UUIDs), and a device listed twice makes no GPU visible.
    ``MIG-`` entries resolve through ``mig_parents`` (MIG UUID → its GPU's NVML index): the
    GPU holding a listed MIG instance gets that instance's ordinal (the first, if several).
    """
    if visible is None:
        return {i: i for i in range(len(uuids))}
    result: dict[int, int | None] = {i: None for i in range(len(uuids))}
    for ordinal, nvml_index in enumerate(_visible_indices(visible, uuids, mig_parents or {})):
        if result[nvml_index] is None:
            result[nvml_index] = ordinal
    return result


def _visible_indices(visible: str, uuids: Sequence[str], migs: Mapping[str, int]) -> list[int]:
    chosen: list[int] = []
    kind: str | None = None
    for entry in visible.split(","):
        index, entry_kind = _resolve_entry(entry.strip(), uuids, migs)
        if index is None or (kind is not None and entry_kind != kind):
            break
        if index in chosen and entry_kind != "mig":
            return []
        kind = entry_kind
        chosen.append(index)
    return chosen


def _resolve_entry(entry: str, uuids: Sequence[str], migs: Mapping[str, int]
                   ) -> tuple[int | None, str]:
    digits = re.match(r"\d+", entry)
    if digits:  # CUDA reads the leading integer ("1abc" → 1)
        n = int(digits.group())
        return (n if n < len(uuids) else None), "index"
    if entry.upper().startswith("GPU-") and len(entry) > 4:
        prefix = entry.lower()
        matches = [i for i, u in enumerate(uuids) if u.lower().startswith(prefix)]
        return (matches[0] if len(matches) == 1 else None), "uuid"
    if entry.upper().startswith("MIG-") and len(entry) > 4:
        return {k.lower(): v for k, v in migs.items()}.get(entry.lower()), "mig"
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
        self._migs: list[MigInstance] = []

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

    def mig_instances(self) -> list[MigInstance]:
        """The MIG instances of GPUs in MIG mode (memory read now); empty without MIG."""
        with self._lock:
            if not self._ensure():
                return []
            self._migs = self._find_migs()
            return list(self._migs)

    def _find_migs(self) -> list[MigInstance]:
        out: list[MigInstance] = []
        for dev in self._devices:
            mode = self._query("nvmlDeviceGetMigMode", dev.handle)
            if not mode or not mode[0]:
                continue
            for slot in range(self._query("nvmlDeviceGetMaxMigDeviceCount", dev.handle) or 0):
                handle = self._query("nvmlDeviceGetMigDeviceHandleByIndex", dev.handle, slot)
                if handle is None:
                    continue
                mem = self._query("nvmlDeviceGetMemoryInfo", handle)
                out.append(MigInstance(
                    _text(self._query("nvmlDeviceGetUUID", handle)), dev.index,
                    f"{dev.name} MIG {slot}", _scaled(getattr(mem, "total", None), MIB),
                    _scaled(getattr(mem, "used", None), MIB)))
        return out

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
            visible = env_value("CUDA_VISIBLE_DEVICES") or None
        self._migs = self._find_migs()
        self._ordinals = cuda_ordinals(visible, uuids, {m.uuid: m.gpu_index for m in self._migs})
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
