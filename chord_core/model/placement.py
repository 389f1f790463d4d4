"""Pure decisions about where and in which precision the model runs.

* ``parse_max_memory`` — the user's memory cap (``0.9``, ``"20GiB"``, ``"0:20GB,1:10GB"``,
  ``"0.9,cpu=64GiB"`` or a dict) → the ``max_memory`` dict accelerate expects (bytes).
* ``choose_dtype`` — bf16 on GPUs that support it natively, fp16 on older GPUs, fp32 on CPU.
* ``check_placement`` — refuse a device map that would silently run part of the model from
  CPU/disk while GPUs exist (it works, but 10–100× slower), unless offload is allowed.

No torch import here: callers pass in what they measured, tests pass tables.
"""

from __future__ import annotations

import re
from typing import Mapping

from chord_core.errors import ConfigError, PlacementError

DEFAULT_GPU_FRACTION = 0.9
_DTYPE_ALIASES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16",
                  "float16": "float16", "half": "float16", "fp32": "float32",
                  "float32": "float32", "float": "float32"}
_UNITS = {"": None, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_MAX_MEMORY_HINT = ('use a fraction of each GPU ("0.9"), a size ("20GiB", "20GB"), per-GPU '
                    'sizes ("0:20GiB,1:10GiB"), and optionally ",cpu=64GiB"')

MemoryValue = str | float | int


def format_bytes(n: int | float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _value_bytes(value: MemoryValue, total: int | None, what: str) -> int:
    """A fraction of ``total`` (0 < f ≤ 1) or a size with a unit → bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"invalid memory cap for {what}: {value!r}", hint=_MAX_MEMORY_HINT)
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        match = _SIZE.match(str(value))
        if not match or match.group(2).lower() not in _UNITS:
            raise ConfigError(f"invalid memory cap for {what}: {value!r}", hint=_MAX_MEMORY_HINT)
        number, unit = float(match.group(1)), match.group(2).lower()
    if unit == "":
        if not 0 < number <= 1:
            raise ConfigError(f"memory cap for {what} must be a fraction in (0, 1] or carry a "
                              f"unit, got {value!r}", hint=_MAX_MEMORY_HINT)
        if total is None:
            raise ConfigError(f"a fraction cannot cap {what} (its size is unknown): {value!r}",
                              hint='give a size such as "64GiB"')
        return int(total * number)
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ConfigError(f"memory cap for {what} must be positive, got {value!r}",
                          hint=_MAX_MEMORY_HINT)
    return size


def _split_spec(spec: str) -> dict[str, str]:
    """``"0.9,cpu=64GiB"`` / ``"0:20GiB,1:10GiB"`` → {"*": "0.9", "cpu": "64GiB"} / {"0": ..}."""
    items: dict[str, str] = {}
    for raw in spec.split(","):
        part = raw.strip()
        if not part:
            raise ConfigError(f"invalid max memory {spec!r}: empty item", hint=_MAX_MEMORY_HINT)
        key, sep, value = part.partition("=") if "=" in part else part.rpartition(":")
        key, value = (key.strip().lower(), value.strip()) if sep else ("*", part)
        if key in items:
            raise ConfigError(f"invalid max memory {spec!r}: {key!r} given twice",
                              hint=_MAX_MEMORY_HINT)
        items[key] = value
    return items


def _normalise_key(key: object, gpu_totals: Mapping[int, int]) -> int | str:
    text = str(key).strip().lower()
    if text in ("cpu", "*"):
        return text
    if text.startswith("cuda:"):
        text = text[5:]
    if not text.isdigit():
        raise ConfigError(f"invalid device {key!r} in max memory", hint=_MAX_MEMORY_HINT)
    index = int(text)
    if index not in gpu_totals:
        visible = ", ".join(str(i) for i in sorted(gpu_totals)) or "none"
        raise ConfigError(f"GPU {index} in max memory is not visible (visible GPUs: {visible})",
                          hint="use the CUDA ordinals of the visible GPUs (they start at 0)")
    return index


def parse_max_memory(spec: MemoryValue | Mapping[object, MemoryValue] | None,
                     gpu_totals_bytes: Mapping[int, int],
                     cpu_memory: MemoryValue | None = None) -> dict[int | str, int] | None:
    """The ``max_memory`` dict for ``from_pretrained`` (values in bytes), or None for no cap.

    ``gpu_totals_bytes`` maps each visible CUDA ordinal to its total memory. A value without
    a key applies to every GPU; ``cpu`` caps offload to system memory.
    """
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        if cpu_memory is None:
            return None
        spec = DEFAULT_GPU_FRACTION
    if isinstance(spec, Mapping):
        items = {_normalise_key(k, gpu_totals_bytes): v for k, v in spec.items()}
    elif isinstance(spec, str):
        items = {_normalise_key(k, gpu_totals_bytes): v for k, v in _split_spec(spec).items()}
    else:
        items = {"*": spec}
    if cpu_memory is not None:
        items["cpu"] = cpu_memory
    result: dict[int | str, int] = {}
    for index, total in sorted(gpu_totals_bytes.items()):
        value = items.get(index, items.get("*", DEFAULT_GPU_FRACTION))
        size = _value_bytes(value, total, f"GPU {index}")
        if total and size > total:
            raise ConfigError(f"memory cap {value!r} for GPU {index} exceeds its "
                              f"{format_bytes(total)}", hint="use a fraction such as 0.9")
        result[index] = size
    if "cpu" in items:
        result["cpu"] = _value_bytes(items["cpu"], None, "cpu")
    return result or None


def choose_dtype(device_kind: str, bf16_supported: bool, override: str = "auto") -> str:
    """The torch dtype name to load with. ``override`` (``cfg.dtype``) wins unless "auto"."""
    choice = (override or "auto").strip().lower()
    if choice != "auto":
        if choice not in _DTYPE_ALIASES:
            raise ConfigError(f"unknown dtype {override!r}",
                              hint="use auto, bfloat16, float16 or float32")
        name = _DTYPE_ALIASES[choice]
        if name == "bfloat16" and device_kind == "cuda" and not bf16_supported:
            raise ConfigError("this GPU has no native bfloat16 support",
                              hint="use --dtype float16 (or auto)")
        return name
    if device_kind == "cuda":
        return "bfloat16" if bf16_supported else "float16"
    return "float32"


def check_placement(device_map: Mapping[str, str | int], cuda_available: bool,
                    allow_offload: bool, module_bytes: Mapping[str, int] | None = None) -> None:
    """PlacementError when modules would run from CPU/disk although GPUs are present."""
    offloaded = [name for name, dev in device_map.items() if str(dev) in ("cpu", "disk")]
    if not offloaded or not cuda_available or allow_offload:
        return
    where = sorted({str(device_map[name]) for name in offloaded})
    shown = ", ".join(name or "<whole model>" for name in offloaded[:5])
    more = f" and {len(offloaded) - 5} more" if len(offloaded) > 5 else ""
    size = ""
    if module_bytes:
        size = f" ({format_bytes(sum(module_bytes.get(n, 0) for n in offloaded))})"
    raise PlacementError(
        f"the model does not fit on the GPUs: {len(offloaded)} module(s){size} would run from "
        f"{'/'.join(where)} ({shown}{more}), which is 10-100x slower",
        hint="use a smaller model (e.g. Qwen/Qwen2.5-VL-3B-Instruct), raise --max-memory "
             "(e.g. 0.95), free or add GPUs, or set CHORD_ALLOW_OFFLOAD=1 to accept offloading")
