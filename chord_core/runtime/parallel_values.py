"""Values of the multi-GPU settings, checked one by one: ``VALIDATORS`` maps each setting
of ``parallel_config.ParallelConfig`` to a function (value, where it came from) → the checked
value, or a ConfigError naming the source, the value and what is allowed."""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Mapping

from chord_core.config import STRATEGIES, STRATEGY_ALIASES, normalise_strategy
from chord_core.errors import ConfigError

SIZE_RE = re.compile(r"^\s*\d+(\.\d+)?\s*[KMGT]i?B\s*$", re.IGNORECASE)


def bad_value(where: str, must: str, value: Any, hint: str) -> ConfigError:
    return ConfigError(f"{where} must be {must}, got {value!r}", hint=hint)


def as_int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise bad_value(where, f"a whole number ≥ {minimum}", value, f"use e.g. {max(minimum, 1)}")
    return value


def as_float(value: Any, where: str, lo: float, hi: float, *, lo_open: bool,
              hint: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            pass
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and (lo < value if lo_open else lo <= value) and value <= hi)
    if not ok:
        interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise bad_value(where, f"in {interval}", value, hint)
    return float(value)


def as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else ""
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise bad_value(where, "true or false", value, "write true or false")


def _strategy(value: Any, where: str) -> str:
    try:
        return normalise_strategy("auto" if value is None else value
                                  if isinstance(value, str) else "?")
    except ConfigError:
        allowed = ", ".join(STRATEGIES) + " (or " + ", ".join(STRATEGY_ALIASES) + ")"
        raise bad_value(where, f"one of {allowed}", value,
                   "use auto, replicate (data_parallel) or shard") from None


def _num_gpus(value: Any, where: str) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in {"all", "auto"}):
        return None
    try:
        return as_int(value, where, 1)
    except ConfigError:
        raise bad_value(where, "a whole number ≥ 1 or 'all'", value,
                   "use e.g. 2, or all for every visible GPU") from None


def _gpus(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in {"all", ""}):
        return None
    items = value.split(",") if isinstance(value, str) else value
    hint = "list CUDA ordinals, e.g. 0,1 (as numbered inside CUDA_VISIBLE_DEVICES)"
    if isinstance(items, (int, bool)) or not isinstance(items, (list, tuple)):
        items = [items]
    try:
        out = tuple(as_int(i, where, 0) for i in items)
    except ConfigError:
        raise bad_value(where, "a list of GPU numbers ≥ 0", value, hint) from None
    if not out or len(set(out)) != len(out):
        raise bad_value(where, "a non-empty list without repeats", value, hint)
    return out


def _gpu_weights(value: Any, where: str) -> dict[int, float]:
    if value is None or value == "":
        return {}
    hint = "give a positive weight per GPU, e.g. 0:1.0,1:0.8 (a faster card gets more work)"
    if isinstance(value, str):
        pairs = [p.split(":", 1) for p in value.split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise bad_value(where, "GPU:weight pairs like 0:1.0,1:0.8", value, hint)
        value = dict(pairs)
    if not isinstance(value, Mapping):
        raise bad_value(where, "a mapping of GPU number to weight", value, hint)
    out: dict[int, float] = {}
    for gpu, weight in value.items():
        index = as_int(gpu, f"{where} (GPU {gpu!r})", 0)
        out[index] = as_float(weight, f"{where} (GPU {gpu})", 0.0, 1e6, lo_open=True, hint=hint)
    return out


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise bad_value(where, "a name such as nccl", value, "write e.g. nccl (it is not used)")
    return value.strip()


def as_fraction(value: Any, where: str) -> float:
    return as_float(value, where, 0.0, 1.0, lo_open=True,
                     hint="use a fraction of each GPU's memory, e.g. 0.9")


VALIDATORS: dict[str, Callable[[Any, str], Any]] = {
    "strategy": _strategy,
    "num_gpus": _num_gpus,
    "gpus": _gpus,
    "batch_size_per_gpu": lambda v, w: as_int(v, w, 1),
    "max_memory_fraction": as_fraction,
    "pin_memory": as_bool,
    "comm_backend": _text,
    "comm_timeout_s": lambda v, w: as_float(v, w, 0.0, 1e9, lo_open=True,
                                             hint="use seconds, e.g. 1800"),
    "memory_optimization": as_bool,
    "max_allocated_ratio": lambda v, w: None if v is None else as_fraction(v, w),
    "reserved_memory_mib": lambda v, w: as_int(v, w, 0),
    "fragmentation_threshold": lambda v, w: None if v is None else as_float(
        v, w, 0.0, 1.0, lo_open=False, hint="use e.g. 0.1"),
    "gpu_weights": _gpu_weights,
    "cpu_workers": lambda v, w: as_int(v, w, 0),
}
