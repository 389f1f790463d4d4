"""GPU planner: from a model's size and the GPUs' free memory, choose replica groups.

    strategy "replicate"  one replica per GPU (data parallel) — each GPU must hold the model
    strategy "shard"      one model across all selected GPUs (``device_map="auto"``)
    strategy "auto"       the smallest group size that holds the model, dividing the GPUs
                          evenly; as many groups (replicas) as fit

The estimate is weights × 1.2 (activations, KV cache, CUDA context — the real-use factor in
shared/design/QWEN_FACTS.md) against each GPU's free memory × ``max_memory_fraction``.
Everything here is pure: the planner is tested on made-up inventories.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from chord_core.config import engine_strategy, normalise_strategy
from chord_core.errors import ConfigError, ResourceError
from chord_core.gpus.devices import GpuInfo

GIB = 1024**3
OVERHEAD = 1.2
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Known official checkpoints (parameters, vision tower included) for a plan before download.
KNOWN_PARAMS = {
    "qwen2.5-vl-3b": 3.75e9, "qwen2.5-vl-7b": 8.29e9,
    "qwen2.5-vl-32b": 33.5e9, "qwen2.5-vl-72b": 73.4e9,
    # Qwen3-VL (qwen3_params.py on the official shapes; MoE: every expert counted — all of
    # them sit in GPU memory, so a 30B-A3B plans like a 31 B dense model, not a 3 B one)
    "qwen3-vl-2b": 2.13e9, "qwen3-vl-4b": 4.44e9, "qwen3-vl-8b": 8.77e9,
    "qwen3-vl-32b": 33.36e9, "qwen3-vl-30b-a3b": 31.07e9, "qwen3-vl-235b-a22b": 235.67e9,
}


@dataclass(frozen=True)
class GpuPlan:
    """The chosen placement. ``groups`` lists CUDA ordinals; each group loads one replica."""

    strategy: str
    groups: tuple[tuple[int, ...], ...]
    model_bytes: int
    need_bytes: int
    per_gpu_budget_bytes: dict[int, int] = field(default_factory=dict)
    unused: tuple[int, ...] = ()
    explanation: str = ""

    @property
    def replicas(self) -> int:
        return len(self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "groups": [list(g) for g in self.groups],
                "model_gib": round(self.model_bytes / GIB, 2),
                "need_gib": round(self.need_bytes / GIB, 2),
                "per_gpu_budget_gib": {str(k): round(v / GIB, 2)
                                       for k, v in self.per_gpu_budget_bytes.items()},
                "unused": list(self.unused), "explanation": self.explanation}


def params_from_config(config: dict[str, Any]) -> int:
    """Parameter count of a Qwen2.5-VL or Qwen3-VL (dense or MoE) config.json: text decoder
    + vision tower (Qwen3-VL: with its deepstack mergers)."""
    if str(config.get("model_type", "")).startswith("qwen3_vl"):
        from chord_core.model.qwen3_params import qwen3_vl_params

        return qwen3_vl_params(config)
    text = config.get("text_config") or config
    vision = config.get("vision_config") or {}
    h, inter = text["hidden_size"], text["intermediate_size"]
    heads, kv = text["num_attention_heads"], text.get("num_key_value_heads") or \
        text["num_attention_heads"]
    head_dim = h // heads
    attn = h * h * 2 + 2 * h * kv * head_dim + h + 2 * kv * head_dim
    layer = attn + 3 * h * inter + 2 * h
    embed = text["vocab_size"] * h * (1 if config.get("tie_word_embeddings") else 2)
    total = text["num_hidden_layers"] * layer + embed + h
    if vision:
        vh = vision.get("hidden_size", 1280)
        vi = vision.get("intermediate_size", 3420)
        depth = vision.get("depth", 32)
        patch = vision.get("patch_size", 14) ** 2 * vision.get("temporal_patch_size", 2) * 3
        merger_in = vh * vision.get("spatial_merge_size", 2) ** 2
        out = vision.get("out_hidden_size", h)
        total += depth * (4 * vh * vh + 3 * vh * vi + 4 * vh) + patch * vh
        total += merger_in * merger_in + merger_in * out
    return int(total)


def model_params(model: str, config_path: Path | None = None) -> int:
    """Parameters of ``model``: from its config.json when local, else the known table."""
    if config_path is not None and config_path.is_file():
        return params_from_config(json.loads(config_path.read_text()))
    key = Path(model).name.lower().replace("-instruct", "")
    for name, count in KNOWN_PARAMS.items():
        if name in key:
            return int(count)
    raise ConfigError(f"cannot tell the size of model {model!r}",
                      hint="download it first, or give a local folder with config.json")


def plan_gpus(model_bytes: int, gpus: Sequence[GpuInfo], *, strategy: str = "auto",
              max_memory_fraction: float = 0.9, reserve_bytes: int = 0) -> GpuPlan:
    """Choose replica groups for a model of ``model_bytes`` weights on ``gpus``."""
    strategy = normalise_strategy(strategy)
    if not 0 < max_memory_fraction <= 1:
        raise ConfigError(f"max_memory fraction must be in (0, 1], got {max_memory_fraction}",
                          hint="use e.g. 0.9")
    need = int(model_bytes * OVERHEAD)
    if not gpus:
        raise ResourceError("no GPU available for a GPU plan",
                            hint="run on CPU workers (--cpu-workers N) or on a machine with GPUs")
    budget = {g.index: max(0, int(g.free_bytes * max_memory_fraction) - reserve_bytes)
              for g in gpus}
    order = sorted(gpus, key=lambda g: g.index)
    if strategy == "replicate":
        return _replicate(model_bytes, need, order, budget)
    if strategy == "shard":
        return _group(model_bytes, need, order, budget, len(order), "shard")
    for size in _divisors(len(order)):
        groups = _chunks(order, size)
        if all(sum(budget[g.index] for g in grp) >= need for grp in groups):
            return _group(model_bytes, need, order, budget, size, "auto")
    return _group(model_bytes, need, order, budget, len(order), "auto")


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def _chunks(order: Sequence[GpuInfo], size: int) -> list[list[GpuInfo]]:
    return [list(order[i:i + size]) for i in range(0, len(order) - size + 1, size)]


def _replicate(model_bytes: int, need: int, order: Sequence[GpuInfo],
               budget: dict[int, int]) -> GpuPlan:
    fit = [g.index for g in order if budget[g.index] >= need]
    if not fit:
        raise ResourceError(_too_big(need, order, budget, per_gpu=True),
                            hint="use strategy shard or auto, or a smaller model")
    unused = tuple(g.index for g in order if g.index not in fit)
    return GpuPlan("replicate", tuple((i,) for i in fit), model_bytes, need,
                   {i: budget[i] for i in fit}, unused,
                   f"{len(fit)} replica(s), one per GPU; each needs ≈ {need / GIB:.1f} GiB")


def _group(model_bytes: int, need: int, order: Sequence[GpuInfo], budget: dict[int, int],
           size: int, strategy: str) -> GpuPlan:
    groups = _chunks(order, size)
    if not all(sum(budget[g.index] for g in grp) >= need for grp in groups):
        raise ResourceError(_too_big(need, order, budget, per_gpu=False),
                            hint=_what_would_fit(need, order))
    used = {g.index for grp in groups for g in grp}
    per_group_gib = need / GIB
    kind = "one replica per GPU" if size == 1 else f"{len(groups)} group(s) of {size} GPUs"
    return GpuPlan(strategy, tuple(tuple(g.index for g in grp) for grp in groups), model_bytes,
                   need, {i: budget[i] for i in used},
                   tuple(g.index for g in order if g.index not in used),
                   f"{kind}; each replica needs ≈ {per_group_gib:.1f} GiB")


def _too_big(need: int, order: Sequence[GpuInfo], budget: dict[int, int], *,
             per_gpu: bool) -> str:
    have = max(budget.values()) if per_gpu else sum(budget.values())
    where = "on any single GPU" if per_gpu else f"on all {len(order)} GPU(s) together"
    return (f"the model does not fit: it needs ≈ {need / GIB:.0f} GiB of GPU memory, "
            f"{where} ≈ {have / GIB:.0f} GiB is usable")


def _what_would_fit(need: int, order: Sequence[GpuInfo]) -> str:
    per = max(g.total_bytes for g in order) * 0.9
    k = int(-(-need // per)) if per > 0 else 0
    options = [f"{k} GPU(s) like {order[0].name} would hold it" if k else ""]
    best: dict[str, str] = {}  # per family ("qwen2.5-vl", "qwen3-vl"): the largest that fits
    for name, count in KNOWN_PARAMS.items():
        family = name[:name.index("-vl") + 3]
        if count * 2 * OVERHEAD <= per and count > KNOWN_PARAMS.get(best.get(family, ""), 0):
            best[family] = name
    if best:
        options.append(f"{' or '.join(best.values())} fits one of these GPUs")
    options.append("or CHORD_ALLOW_OFFLOAD=1 to spill to CPU memory (slow)")
    return "; ".join(o for o in options if o)


# -- one engine in one process ------------------------------------------------------------


@dataclass(frozen=True)
class EnginePlacement:
    """Where one in-process model goes: ``devices`` (CUDA ordinals) and the ``max_memory`` caps
    for ``from_pretrained`` (only the chosen GPUs, plus ``cpu`` when the user capped it).
    ``sharded`` means ``device_map="auto"`` over ``devices``; otherwise the whole model sits
    on ``devices[0]``."""

    devices: tuple[int, ...]
    max_memory: dict[int | str, int] | None
    sharded: bool
    need_bytes: int
    reason: str

    @property
    def device_map(self) -> Any:
        return "auto" if self.sharded else {"": f"cuda:{self.devices[0]}"}


def place_engine(model_bytes: int, gpus: Sequence[GpuInfo], caps: dict[int | str, int] | None,
                 *, strategy: str = "auto", fraction: float = 0.9) -> EnginePlacement:
    """Place one model on the fewest GPUs that hold it with headroom.

    A GPU can give ``min(cap, free)`` bytes, where ``cap`` is the user's ``max_memory`` for it
    (default ``fraction`` × its total). The model needs its weights × ``OVERHEAD``.
    ``auto``: the lowest-numbered GPU that holds it; else the fewest GPUs (largest budgets
    first) that hold it together; else every GPU, so the loader's offload check can say what
    would fit. ``single``: one GPU or ResourceError. ``shard``: every GPU, within the caps."""
    strategy = engine_strategy(strategy)
    need = int(model_bytes * OVERHEAD)
    if not gpus:
        raise ResourceError("no GPU available to place the model on",
                            hint="use --device cpu, or check the driver / CUDA_VISIBLE_DEVICES")
    order = sorted(gpus, key=lambda g: g.index)
    caps = dict(caps or {})
    cap_of = {g.index: int(caps.get(g.index, g.total_bytes * fraction)) for g in order}
    budget = {g.index: min(cap_of[g.index], g.free_bytes) for g in order}
    gib = need / GIB
    if strategy == "shard":
        return _engine(order, caps, cap_of, need, True,
                       f"sharded over all {len(order)} visible GPU(s) as asked; needs ≈ "
                       f"{gib:.1f} GiB")
    fits = [g for g in order if budget[g.index] >= need]
    if fits:
        g = fits[0]
        return _engine([g], caps, cap_of, need, False,
                       f"one GPU (cuda:{g.index}, {budget[g.index] / GIB:.0f} GiB usable) holds "
                       f"it: needs ≈ {gib:.1f} GiB")
    if strategy == "single":
        raise ResourceError(_too_big(need, order, budget, per_gpu=True),
                            hint="use --strategy shard (or auto) to spread it over GPUs, or a "
                                 "smaller model")
    by_budget = sorted(order, key=lambda g: (-budget[g.index], g.index))
    for k in range(2, len(order) + 1):
        chosen = by_budget[:k]
        if sum(budget[g.index] for g in chosen) >= need:
            chosen = sorted(chosen, key=lambda g: g.index)
            names = ", ".join(f"cuda:{g.index}" for g in chosen)
            return _engine(chosen, caps, cap_of, need, True,
                           f"no single GPU holds it (needs ≈ {gib:.1f} GiB): sharded over the "
                           f"{k} GPUs with most room ({names})")
    return _engine(order, caps, cap_of, need, True,
                   f"does not fit on the GPUs (needs ≈ {gib:.1f} GiB, "
                   f"{sum(budget.values()) / GIB:.0f} GiB usable): spread over all of them")


def _engine(chosen: Sequence[GpuInfo], caps: dict[int | str, int], cap_of: dict[int, int],
            need: int, sharded: bool, reason: str) -> EnginePlacement:
    ids = tuple(g.index for g in chosen)
    mem: dict[int | str, int] | None = None
    if sharded or caps:
        # accelerate places weights on exactly the devices named in max_memory
        mem = {i: cap_of[i] for i in ids if sharded or i in caps}
        if "cpu" in caps:
            mem["cpu"] = int(caps["cpu"])
        mem = mem or None
    return EnginePlacement(ids, mem, sharded, need, reason)


# -- describe batches ---------------------------------------------------------------------------
MAX_DESCRIBE_BATCH = 32  # decode rows a default describe batch grows to (a power of two)
DESCRIBE_MEMORY_SHARE = 0.5  # of the device memory free now, for one describe batch


def describe_batch_size(clip_bytes: int, kv_row_bytes: int, free_bytes: int, *,
                        part_bytes: int = 0, part: int = 8, held_rows: Sequence[int] = (),
                        top: int = MAX_DESCRIBE_BATCH) -> int:
    """Clips per describe batch when the caller does not say: the largest power of two up to
    ``top`` whose memory fits ``DESCRIBE_MEMORY_SHARE`` of ``free_bytes``. A batch of ``b``
    costs ``b × clip_bytes`` (what every clip holds until the decode: its prefill's cache),
    ``min(b, part) × part_bytes`` (what a clip needs only while its part of the batch is
    prefilled: pixels, activations), and a decode buffer of ``b`` rows at ``kv_row_bytes`` a
    row, unless the decoder already holds one for ``b`` rows (``held_rows``: allocated, so
    not in the free memory). Decoding reads the weights once a step for all rows, so a
    larger batch is nearly free per clip until the memory runs out (issue 36: W1 248
    clips/min at 8 rows, 287 at 24 on an H200)."""
    budget = DESCRIBE_MEMORY_SHARE * max(0, free_bytes)

    def need(b: int) -> int:
        rows = 0 if b in held_rows else b * kv_row_bytes
        return b * clip_bytes + min(b, part) * part_bytes + rows

    b = 1 << max(0, top.bit_length() - 1)
    while b > 1 and need(b) > budget:
        b //= 2
    return b
