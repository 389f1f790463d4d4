"""Where a model's weights go: the device map for ``from_pretrained``.

Chord's own placement (``PLACE``) asks the planner (``planner.place_engine``) for the fewest
GPUs that hold the model with headroom, builds the map on a weightless ("meta") copy of the
model with accelerate, and checks it before any weight is read; a user's own ``device_map``
(an accelerate policy name or an explicit map) is used as given.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from chord_core.config import ModelConfig
from chord_core.errors import ConfigError
from chord_core.model.placement import parse_max_memory

log = logging.getLogger(__name__)


def gpu_totals() -> dict[int, int]:
    import torch

    if not torch.cuda.is_available():
        return {}
    return {i: torch.cuda.get_device_properties(i).total_memory
            for i in range(torch.cuda.device_count())}


# device_map marker: Chord places the model itself (planner.place_engine) once it knows its size
PLACE = "<chord-placement>"


_ACCELERATE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def device_plan(cfg: ModelConfig) -> tuple[str, Any, dict | None]:
    """(device kind, device_map for from_pretrained or ``PLACE``, max_memory) from ``cfg``."""
    import torch

    device = (cfg.device or "auto").strip().lower()
    if device not in ("auto", "cpu", "cuda") and not (
            device.startswith("cuda:") and device[5:].isdigit()):
        raise ConfigError(f"unknown device {cfg.device!r}", hint="use auto, cpu, cuda or cuda:N")
    cuda = torch.cuda.is_available()
    if device == "cpu" or (device == "auto" and not cuda):
        return "cpu", {"": "cpu"}, None
    if not cuda:
        raise ConfigError(f"device {cfg.device!r} asked for CUDA, but no GPU is visible",
                          hint="use --device cpu, or check the driver / CUDA_VISIBLE_DEVICES")
    if device in ("auto", "cuda"):
        caps = parse_max_memory(cfg.max_memory, gpu_totals(), cfg.cpu_memory)
        return "cuda", explicit_map(cfg.device_map), caps
    if int(device[5:]) >= torch.cuda.device_count():
        raise ConfigError(f"{cfg.device} is not visible ({torch.cuda.device_count()} GPUs)",
                          hint="use cuda:0 .. cuda:N-1 or auto")
    return "cuda", {"": device}, None


def explicit_map(device_map: Any) -> Any:
    """The user's own ``device_map``: a dict or one of accelerate's strategies is used as given
    (``"auto"`` here means what it means in transformers: spread over every visible GPU);
    None means Chord places the model."""
    if device_map is None:
        return PLACE
    if isinstance(device_map, Mapping):
        return {str(k): v for k, v in device_map.items()}
    if isinstance(device_map, str) and device_map.strip().lower() in _ACCELERATE_MAPS:
        return device_map.strip().lower()
    raise ConfigError(f"unsupported device_map {device_map!r}",
                      hint=f"use a dict, one of {', '.join(_ACCELERATE_MAPS)}, or leave it out "
                           "to let Chord place the model")


def meta_model(cls: Any, config: Any, dtype: Any) -> Any:
    import torch

    with torch.device("meta"):
        return cls._from_config(config, dtype=dtype)


def place(cfg: ModelConfig, meta_model: Any, caps: dict | None) -> Any:
    """Chord's placement for one engine: the fewest GPUs that hold the model with headroom."""
    from chord_core.gpus.devices import cuda_inventory
    from chord_core.model.planner import place_engine

    weights = sum(p.numel() * p.element_size() for p in meta_model.parameters())
    placement = place_engine(weights, cuda_inventory(), caps, strategy=cfg.strategy)
    log.info("placement: %s", placement.reason)
    return placement


def planned_device_map(meta_model: Any, device_map: Any, max_memory: dict | None
                        ) -> tuple[Any, dict[str, int]]:
    """The map ``device_map`` (a strategy string) would produce, computed on the weightless
    model so the offload check runs before any weight is read, plus the bytes of each
    offloaded module. Falls back to the string if this transformers version lacks the helper
    (the check then runs after loading)."""
    try:
        from transformers.integrations.accelerate import _get_device_map
    except ImportError:
        return device_map, {}
    try:
        planned = dict(_get_device_map(meta_model, device_map, max_memory, None))
    except TypeError as exc:  # private helper: its signature may change between versions
        log.warning("cannot plan the device map before loading (%s); checking after", exc)
        return device_map, {}
    offloaded = {}
    for name, dev in planned.items():
        if str(dev) in ("cpu", "disk"):
            params = meta_model.get_submodule(name).parameters()
            offloaded[name] = sum(p.numel() * p.element_size() for p in params)
    return planned, offloaded


def device_name(dev: Any) -> str:
    return f"cuda:{dev}" if isinstance(dev, int) else str(dev)


def input_device(model: Any) -> str:
    return str(model.get_input_embeddings().weight.device)
