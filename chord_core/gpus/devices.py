"""Device numbering: which physical GPU a number means, in this process and in its workers.

Chord numbers GPUs as the user sees them: ``--gpus 0,1`` / ``CHORD_GPUS`` / ``device="cuda:1"``
are CUDA ordinals of the process the user started, i.e. positions in its
``CUDA_VISIBLE_DEVICES`` list (or, with the variable unset, nvidia-smi's numbering — entry
points set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless the user chose an order).
``CUDA_VISIBLE_DEVICES=2,3 … --gpus 1`` is physical GPU 3.

A worker process is handed the *entries* of the parent's visible list for its ordinals — the
same text the user wrote: an index, a ``GPU-`` UUID or a ``MIG-`` UUID — so CUDA resolves them
in the worker exactly as it did in the parent (workers inherit ``CUDA_DEVICE_ORDER``). With the
variable unset, the worker is given the GPUs' UUIDs, which no ordering can change.

Pure functions, tested on made-up device lists; torch and NVML are touched only in
``cuda_inventory``.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, MutableMapping, Sequence

from chord_core.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the planner sees it: CUDA ordinal, name, total and free memory in bytes,
    and (when NVML knows it) the UUID that names it to CUDA whatever the device order."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    uuid: str = ""


_MIG = re.compile(r"^MIG-", re.IGNORECASE)


def apply_device_order(env: MutableMapping[str, str] | None = None) -> str:
    """Make CUDA number GPUs in PCI bus order (as nvidia-smi and NVML do) unless the user set
    ``CUDA_DEVICE_ORDER``. Call from entry points before torch starts CUDA."""
    env = os.environ if env is None else env
    return env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


def visible_entries(value: str | None) -> list[str] | None:
    """The entries of a ``CUDA_VISIBLE_DEVICES`` value, as CUDA reads them: comma-separated,
    stripped, up to the first empty or malformed one. None when the variable is unset."""
    if value is None:
        return None
    out: list[str] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry or not _well_formed(entry):
            break
        out.append(entry)
    return out


def _well_formed(entry: str) -> bool:
    if re.match(r"^\d+", entry):
        return True
    upper = entry.upper()
    return (upper.startswith("GPU-") or upper.startswith("MIG-")) and len(entry) > 4


def worker_visible(ordinals: Sequence[int], parent_visible: str | None,
                   uuids: Mapping[int, str] | None = None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a worker that should own the parent's CUDA ``ordinals``.

    ``parent_visible`` is the parent's own value (None = unset); ``uuids`` maps the parent's
    ordinals to GPU UUIDs (from NVML) for the unset case. Raises ConfigError for an ordinal the
    parent cannot see."""
    if not ordinals:
        return ""
    entries = visible_entries(parent_visible)
    if entries is not None:
        missing = [o for o in ordinals if not 0 <= o < len(entries)]
        if missing:
            raise ConfigError(
                f"GPU {missing[0]} is not visible: CUDA_VISIBLE_DEVICES={parent_visible!r} "
                f"shows {len(entries)} GPU(s), numbered 0..{len(entries) - 1}",
                hint="number GPUs as they appear in CUDA_VISIBLE_DEVICES (the first is 0)")
        return ",".join(entries[o] for o in ordinals)
    uuids = uuids or {}
    return ",".join(uuids.get(o) or str(o) for o in ordinals)


def describe_visible(parent_visible: str | None) -> str:
    """One line for plans and logs: what ``--gpus`` numbers mean in this process."""
    entries = visible_entries(parent_visible)
    if entries is None:
        return "GPUs numbered as nvidia-smi does (CUDA_VISIBLE_DEVICES unset)"
    if not entries:
        return f"no GPU visible (CUDA_VISIBLE_DEVICES={parent_visible!r})"
    shown = ", ".join(f"{i}→{e}" for i, e in enumerate(entries))
    return f"CUDA_VISIBLE_DEVICES={parent_visible}: GPU numbers {shown}"


def is_mig(entry: str) -> bool:
    return bool(_MIG.match(entry))


# -- this process's GPUs (torch + NVML) -------------------------------------------------------
def cuda_inventory() -> list[GpuInfo]:
    """The CUDA devices this process sees, with total and free memory.

    Free memory comes from NVML, matched by UUID (no CUDA context is created on GPUs the model
    will not use); where NVML cannot say (no driver library, MIG, a UUID it does not list), the
    device counts as empty (free = total)."""
    import torch


    if not torch.cuda.is_available():
        return []
    free_by_uuid = _nvml_free_by_uuid()
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        uuid = _torch_uuid(props)
        free = free_by_uuid.get(uuid, props.total_memory) if uuid else props.total_memory
        out.append(GpuInfo(i, props.name, int(props.total_memory),
                           int(min(free, props.total_memory))))
    return out


def _torch_uuid(props: Any) -> str:
    raw = str(getattr(props, "uuid", "") or "")
    if not raw:
        return ""
    return raw.lower() if raw.upper().startswith(("GPU-", "MIG-")) else f"gpu-{raw.lower()}"


def _nvml_free_by_uuid() -> dict[str, int]:
    from chord_core.gpus.nvml import MIB, Nvml

    nvml = Nvml(visible_devices=None)
    try:
        if not nvml.available:
            return {}
        return {s.uuid.lower(): int((s.memory_total_mib - (s.memory_used_mib or 0.0)) * MIB)
                for s in nvml.sample_all() if s.uuid and s.memory_total_mib}
    finally:
        nvml.close()
