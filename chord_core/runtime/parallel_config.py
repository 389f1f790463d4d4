"""Multi-GPU settings: the ``multigpu_config.yaml`` users already have, plus env and CLI flags.

The file layout is the one the original Chord design documents show::

    parallel:            strategy, num_gpus, gpus, batch_size_per_gpu, gpu_weights,
                         cpu_workers, gradient_accumulation_steps (training only: ignored)
    memory:              max_memory_allocated (fraction of each GPU), pin_memory
    communication:       backend, timeout (training collectives only: ignored)
    memory_optimization: enable, max_allocated_ratio, reserved_memory (MB, read as MiB),
                         fragmentation_threshold (ignored)

Precedence: explicit ``overrides`` (CLI flags, UI) > environment > file > defaults.

Environment: CHORD_STRATEGY, CHORD_NUM_GPUS (a number or ``all``), CHORD_GPUS (CUDA ordinals
``0,1``), CHORD_BATCH_SIZE (per GPU), CHORD_MAX_MEMORY (only a fraction such as ``0.9`` counts
here; sizes such as ``20GiB`` are for the model loader), CHORD_CPU_WORKERS (workers used where
no GPU is available), CHORD_GPU_WEIGHTS (``0:1.0,1:0.8``: load-balancer share per GPU).

Unknown keys never fail a load: they are listed in ``unknown`` with a suggestion (difflib),
and keys we accept but do not use are listed in ``ignored`` with the reason. Bad values raise
``ConfigError`` naming the file, the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import logging
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from chord_core.config import env_value
from chord_core.errors import ConfigError
from chord_core.runtime.parallel_values import (
    SIZE_RE,
    VALIDATORS,
    bad_value,
)

log = logging.getLogger(__name__)

MIB = 1024**2
# section -> file key -> ParallelConfig field ("" = accepted, never used)
SECTIONS: dict[str, dict[str, str]] = {
    "parallel": {"strategy": "strategy", "num_gpus": "num_gpus", "gpus": "gpus",
                 "batch_size_per_gpu": "batch_size_per_gpu", "gpu_weights": "gpu_weights",
                 "cpu_workers": "cpu_workers", "gradient_accumulation_steps": ""},
    "memory": {"max_memory_allocated": "max_memory_fraction", "pin_memory": "pin_memory"},
    "communication": {"backend": "comm_backend", "timeout": "comm_timeout_s",
                      "socket_timeout": ""},
    "memory_optimization": {"enable": "memory_optimization",
                            "max_allocated_ratio": "max_allocated_ratio",
                            "reserved_memory": "reserved_memory_mib",
                            "fragmentation_threshold": "fragmentation_threshold"},
}
_COMM = ("for multi-process training collectives only; Chord's workers are independent "
         "processes that do not use NCCL")
IGNORED_REASONS: dict[str, str] = {
    "parallel.gradient_accumulation_steps": "training only; Chord runs inference",
    "communication.backend": _COMM,
    "communication.timeout": _COMM,
    "communication.socket_timeout": _COMM,
    "memory.pin_memory": "frames reach the GPU once per request, so pinned host buffers "
                         "would not speed anything up; accepted and not used",
    "memory_optimization.fragmentation_threshold":
        "not used; for fragmentation set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
}
ENV_VARS: dict[str, str] = {
    "CHORD_STRATEGY": "strategy", "CHORD_NUM_GPUS": "num_gpus", "CHORD_GPUS": "gpus",
    "CHORD_BATCH_SIZE": "batch_size_per_gpu", "CHORD_CPU_WORKERS": "cpu_workers",
    "CHORD_GPU_WEIGHTS": "gpu_weights",
}
_RANK = {"default": 0, "file": 1, "env": 2, "option": 3}


@dataclass(frozen=True)
class ParallelConfig:
    """How Chord spreads work over GPUs (and CPU workers). Validated on construction.

    ``max_memory_fraction`` is the effective fraction: ``load_parallel_config`` has already
    tightened it to ``max_allocated_ratio`` when memory optimisation is enabled. GPU numbers are CUDA ordinals as the
    process sees them (inside ``CUDA_VISIBLE_DEVICES``). ``num_gpus``/``gpus`` None = all.
    """

    strategy: str = "auto"
    num_gpus: int | None = None
    gpus: tuple[int, ...] | None = None
    batch_size_per_gpu: int = 8
    max_memory_fraction: float = 0.9
    pin_memory: bool = True
    comm_backend: str = "nccl"
    comm_timeout_s: float = 1800.0
    memory_optimization: bool = False
    max_allocated_ratio: float | None = None
    reserved_memory_mib: int = 0
    fragmentation_threshold: float | None = None
    gpu_weights: dict[int, float] = field(default_factory=dict)
    cpu_workers: int = 0
    strategy_given: str = ""
    source: str = ""
    ignored: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.strategy_given:
            object.__setattr__(self, "strategy_given", str(self.strategy or "auto").strip())
        for name, check in VALIDATORS.items():
            object.__setattr__(self, name, check(getattr(self, name), f"ParallelConfig.{name}"))

    @property
    def reserve_bytes(self) -> int:
        """Memory to keep free on each GPU, for ``planner.plan_gpus(reserve_bytes=...)``."""
        return self.reserved_memory_mib * MIB

    def weight(self, gpu: int) -> float:
        """Load-balancer share of ``gpu`` (1.0 unless ``gpu_weights`` says otherwise)."""
        return self.gpu_weights.get(gpu, 1.0)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update({k: list(v) for k, v in out.items() if isinstance(v, tuple)})
        out["gpu_weights"] = {str(k): v for k, v in sorted(self.gpu_weights.items())}
        out["sources"] = dict(self.sources)
        return out

    def report(self) -> list[str]:
        """Human lines for the CLI and the GPU page."""
        return _report(self)


def _src(cfg: ParallelConfig, name: str) -> str:
    src = cfg.sources.get(name, "default")
    return "" if src in ("default", "file") else f" ({src})"


def _report(cfg: ParallelConfig) -> list[str]:
    lines = [f"config: {cfg.source}" if cfg.source else "config: defaults (no file)"]
    given = cfg.strategy_given
    given = "" if given.lower() == cfg.strategy else f" (from {given})"
    lines.append(f"strategy {cfg.strategy}{given}{_src(cfg, 'strategy')}")
    if cfg.gpus is not None:
        lines.append("GPUs: " + ", ".join(map(str, cfg.gpus)) + _src(cfg, "gpus"))
    elif cfg.num_gpus is not None:
        lines.append(f"GPUs: the first {cfg.num_gpus} visible{_src(cfg, 'num_gpus')}")
    else:
        lines.append("GPUs: all visible")
    lines.append(f"batch size per GPU {cfg.batch_size_per_gpu}{_src(cfg, 'batch_size_per_gpu')}")
    lines.append(f"max memory fraction {cfg.max_memory_fraction:g}"
                 f"{_src(cfg, 'max_memory_fraction')}")
    if cfg.reserved_memory_mib:
        lines.append(f"reserved memory {cfg.reserved_memory_mib} MiB per GPU")
    if any(w != 1.0 for w in cfg.gpu_weights.values()):
        lines.append("GPU weights: " + ", ".join(f"{k}={v:g}"
                                                 for k, v in sorted(cfg.gpu_weights.items())))
    if cfg.cpu_workers:
        lines.append(f"CPU workers {cfg.cpu_workers} (used where no GPU is available)")
    lines.extend(cfg.notes)
    lines.extend(f"ignored: {item}" for item in cfg.ignored)
    lines.extend(f"unknown: {item}" for item in cfg.unknown)
    return lines


# -- loading ------------------------------------------------------------------------------

Layer = dict[str, tuple[Any, str]]  # field -> (raw value, where it was written)


def load_parallel_config(path: str | Path | Mapping[str, Any] | None = None, *,
                         env: Mapping[str, str] | None = None,
                         overrides: Mapping[str, Any] | None = None) -> ParallelConfig:
    """Defaults < ``path`` (YAML file, or the same sections as a dict) < ``env``
    (``os.environ`` when None) < ``overrides``."""
    env = os.environ if env is None else env
    file_layer: Layer = {}
    ignored: list[str] = []
    unknown: list[str] = []
    source = ""
    if isinstance(path, Mapping):
        source = "config dict"
        file_layer = _file_layer(path, Path(source), ignored, unknown)
    elif path is not None:
        path = Path(path)
        source = str(path)
        file_layer = _file_layer(_read_yaml(path), path, ignored, unknown)
    notes: list[str] = []
    layers = {"file": file_layer, "env": _env_layer(env, notes),
              "option": _option_layer(overrides or {})}
    values, sources = _merge(layers)
    _drop_disabled_optimisation(values, sources, ignored)
    _reconcile_gpus(values, sources, notes)
    _apply_memory_ratio(values, notes)
    for line in unknown:
        log.warning("%s: %s", source, line)
    return ParallelConfig(**values, source=source, ignored=tuple(ignored),
                          unknown=tuple(unknown), notes=tuple(notes), sources=sources)


def read_config_dict(path: str | Path) -> dict[str, Any]:
    """A ``multigpu_config.yaml`` as a plain nested dict, to edit like the original documents
    do (``config["parallel"]["num_gpus"] = 4``) and pass back as ``config=``."""
    import copy

    return copy.deepcopy(dict(_read_yaml(Path(path))))


def _read_yaml(path: Path) -> Mapping[str, Any]:
    import yaml

    hint = f"fix the file {path}, or leave it out to use defaults"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"parallel config file not found: {path}",
                          hint="check the path, or leave the option out to use defaults") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read parallel config {path}: {exc}", hint=hint) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path.name}{where}: invalid YAML ({problem})", hint=hint) from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{path.name}: the top level must be a mapping of sections, "
                          f"got {type(doc).__name__}", hint=f"start with 'parallel:' ({hint})")
    return doc


def _file_layer(doc: Mapping[str, Any], path: Path, ignored: list[str],
                unknown: list[str]) -> Layer:
    layer: Layer = {}
    for section, body in doc.items():
        name = str(section)
        if name not in SECTIONS:
            unknown.append(_unknown_section(name, body))
            continue
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise ConfigError(f"{path.name}: {name} must be a mapping of keys, got {body!r}",
                              hint=f"indent its keys under '{name}:' in {path}")
        for key, value in body.items():
            _file_key(layer, name, str(key), value, path, ignored, unknown)
    _check_layer(layer, f" (in {path})")
    return layer


def _file_key(layer: Layer, section: str, key: str, value: Any, path: Path,
              ignored: list[str], unknown: list[str]) -> None:
    dotted = f"{section}.{key}"
    target = SECTIONS[section].get(key)
    if target is None:
        unknown.append(_unknown_key(section, key))
        return
    if dotted in IGNORED_REASONS:
        ignored.append(f"{dotted} — {IGNORED_REASONS[dotted]}")
    if target:
        layer[target] = (value, f"{path.name}: {dotted}")


def _unknown_section(name: str, body: Any) -> str:
    guess = difflib.get_close_matches(name, list(SECTIONS), n=1)
    if guess:
        return f"{name} is not a known section; did you mean {guess[0]}?"
    for section, known in SECTIONS.items():
        if name in known:
            return f"{name} is not a known section; did you mean {section}.{name}?"
    if isinstance(body, Mapping):
        keys = [str(k) for k in body]
        homes = [f"{s}.{k}" for k in keys for s, known in SECTIONS.items() if k in known]
        if homes:
            return f"{name} is not a known section; did you mean {homes[0]}?"
    return f"{name} is not a known section (known: {', '.join(SECTIONS)})"


def _unknown_key(section: str, key: str) -> str:
    dotted = f"{section}.{key}"
    guess = difflib.get_close_matches(key, list(SECTIONS[section]), n=1)
    if guess:
        return f"{dotted} is not a known key; did you mean {guess[0]}?"
    for other, known in SECTIONS.items():
        if key in known:
            return f"{dotted} is not a known key; did you mean {other}.{key}?"
    return f"{dotted} is not a known key (known in {section}: {', '.join(SECTIONS[section])})"


def _check_layer(layer: Layer, hint_suffix: str = "") -> None:
    """Validate every value of a layer (even ones a higher layer overrides)."""
    for name, (value, where) in layer.items():
        try:
            checked = VALIDATORS[name](value, where)
            # the strategy keeps the user's spelling: ParallelConfig reports "(from ...)"
            keep = name == "strategy" and isinstance(value, str)
            layer[name] = (value.strip() if keep else checked, where)
        except ConfigError as exc:
            raise ConfigError(exc.message, hint=exc.hint + hint_suffix) from None


def _env_layer(env: Mapping[str, str], notes: list[str]) -> Layer:
    layer: Layer = {name: (env_value(var, env), f"environment variable {var}")
                    for var, name in ENV_VARS.items() if env_value(var, env)}
    memory = _env_fraction(env_value("CHORD_MAX_MEMORY", env), notes)
    if memory is not None:
        layer["max_memory_fraction"] = (memory, "environment variable CHORD_MAX_MEMORY")
    _check_layer(layer)
    return layer


def _env_fraction(raw: str, notes: list[str]) -> str | None:
    """The GPU fraction in CHORD_MAX_MEMORY ("0.9", "0.9,cpu=30GiB"); sizes belong to the
    model loader (config.ModelConfig) and leave the planner's fraction alone."""
    gpu = next((p.strip() for p in raw.split(",") if p.strip() and "=" not in p), "")
    if not gpu:
        return None
    if SIZE_RE.match(gpu):
        notes.append(f"CHORD_MAX_MEMORY={gpu} is a size: it caps model loading, "
                     "the planner keeps its memory fraction")
        return None
    try:
        float(gpu)
    except ValueError:
        raise bad_value("environment variable CHORD_MAX_MEMORY", "a fraction such as 0.9 or a size "
                   "such as 20GiB", raw, "e.g. CHORD_MAX_MEMORY=0.9") from None
    return gpu


def _option_layer(overrides: Mapping[str, Any]) -> Layer:
    extra = sorted(set(overrides) - set(VALIDATORS))
    if extra:
        raise ConfigError(f"unknown parallel option(s): {', '.join(extra)}",
                          hint=f"known options: {', '.join(VALIDATORS)}")
    layer: Layer = {k: (v, f"option {k}") for k, v in overrides.items() if v is not None}
    _check_layer(layer)
    return layer


def _merge(layers: Mapping[str, Layer]) -> tuple[dict[str, Any], dict[str, str]]:
    ordered = [(name, layer, value) for layer in ("file", "env", "option")
               for name, (value, _where) in layers[layer].items()]
    return ({n: v for n, _, v in ordered}, {n: layer for n, layer, _ in ordered})


def _reconcile_gpus(values: dict[str, Any], sources: dict[str, str], notes: list[str]) -> None:
    """Make ``num_gpus`` and an explicit ``gpus`` list agree; the higher layer wins."""
    gpus = values.get("gpus")
    if gpus is None:
        return
    weights = values.get("gpu_weights") or {}
    stray = sorted(set(weights) - set(gpus))
    if stray:
        raise ConfigError(f"gpu_weights names GPU(s) {stray} that are not in gpus {list(gpus)}",
                          hint="give weights only for the GPUs listed in gpus")
    _resolve_gpu_count(values, sources, notes)
    values["gpu_weights"] = {g: weights.get(g, 1.0) for g in values["gpus"]}


def _resolve_gpu_count(values: dict[str, Any], sources: dict[str, str],
                       notes: list[str]) -> None:
    gpus, num = values["gpus"], values.get("num_gpus")
    if num is None or num == len(gpus):
        values["num_gpus"] = len(gpus)
        return
    rank_gpus = _RANK[sources["gpus"]]
    rank_num = _RANK[sources["num_gpus"]]
    if rank_gpus > rank_num:
        notes.append(f"num_gpus {num} ({sources['num_gpus']}) replaced by the {len(gpus)} GPUs "
                     f"listed in gpus ({sources['gpus']})")
        values["num_gpus"] = len(gpus)
    elif rank_num > rank_gpus and num < len(gpus):
        notes.append(f"num_gpus {num} ({sources['num_gpus']}) keeps the first {num} of gpus "
                     f"{list(gpus)}")
        values["gpus"] = gpus[:num]
    else:
        raise ConfigError(f"num_gpus is {num} but gpus lists {len(gpus)} GPU(s) {list(gpus)}",
                          hint="make them agree, or give only one of the two")


def _drop_disabled_optimisation(values: dict[str, Any], sources: dict[str, str],
                                ignored: list[str]) -> None:
    """File values under ``memory_optimization`` count only when its ``enable`` is true."""
    if values.get("memory_optimization"):
        return
    for name, key in (("max_allocated_ratio", "max_allocated_ratio"),
                      ("reserved_memory_mib", "reserved_memory")):
        if sources.get(name) == "file":
            del values[name], sources[name]
            ignored.append(f"memory_optimization.{key} — memory_optimization.enable is not true")


def _apply_memory_ratio(values: dict[str, Any], notes: list[str]) -> None:
    ratio = values.get("max_allocated_ratio")
    fraction = values.get("max_memory_fraction", 0.9)
    if ratio is not None and ratio < fraction:
        notes.append(f"max memory fraction {fraction:g} tightened to {ratio:g} by "
                     "memory_optimization.max_allocated_ratio")
        values["max_memory_fraction"] = ratio
