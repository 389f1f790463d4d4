"""From settings to running workers: GPU inventory → plan → worker specs → JobManager.

``plan_workers`` decides (and explains, before anything loads) which worker processes to
start: one per planned GPU group, or CPU workers where no GPU is present or when asked for.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from chord_core.config import TEST_MODELS, ModelConfig, env_value
from chord_core.errors import ConfigError
from chord_core.gpus.devices import GpuInfo, describe_visible
from chord_core.model.planner import DTYPE_BYTES, GIB, GpuPlan, model_params, plan_gpus
from chord_core.runtime.parallel_config import ParallelConfig
from chord_core.runtime.workers import WorkerSpec, cpu_specs, gpu_specs

if TYPE_CHECKING:
    from chord_core.runtime.executors import Executor
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.protocols import JobStore
    from chord_core.runtime.store_read import StoreView

log = logging.getLogger(__name__)
MIB = 1024**2


@dataclass(frozen=True)
class WorkerPlan:
    """Which workers to start and why (``lines`` are shown to the user before loading)."""

    specs: tuple[WorkerSpec, ...]
    weights: dict[str, float] = field(default_factory=dict)
    gpu_plan: GpuPlan | None = None
    lines: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"workers": [{"worker": s.worker_id, "devices": list(s.devices)}
                            for s in self.specs],
                "weights": self.weights, "lines": list(self.lines),
                "gpu_plan": self.gpu_plan.to_dict() if self.gpu_plan else None}


def gpu_inventory(nvml: Any = None) -> tuple[list[GpuInfo], str]:
    """GPUs visible to this process (CUDA ordinals, free memory) and, if none, why.
    ``CUDA_VISIBLE_DEVICES`` listing MIG instances gives one entry per instance, in order."""
    from chord_core.gpus.devices import is_mig, visible_entries
    from chord_core.gpus.nvml import Nvml

    nvml = nvml or Nvml()
    if not nvml.available:
        return [], nvml.reason
    entries = visible_entries(env_value("CUDA_VISIBLE_DEVICES") or None) or []
    if entries and all(is_mig(e) for e in entries):
        out = _mig_inventory(entries, nvml.mig_instances())
        return out, ("" if out else "none of the MIG instances in CUDA_VISIBLE_DEVICES exists")
    ordinals = nvml.cuda_ordinal_map()
    out = []
    for s in nvml.sample_all():
        cuda = ordinals.get(s.index)
        if cuda is None or s.memory_total_mib is None:
            continue
        free = (s.memory_total_mib - (s.memory_used_mib or 0.0)) * MIB
        out.append(GpuInfo(cuda, s.name, int(s.memory_total_mib * MIB), int(free), s.uuid))
    return sorted(out, key=lambda g: g.index), ("" if out else "no usable NVIDIA GPU")


def _mig_inventory(entries: list[str], migs: list[Any]) -> list[GpuInfo]:
    """One GpuInfo per listed MIG instance, numbered by its position (CUDA stops at the first
    it does not know, and so does this)."""
    by_uuid = {m.uuid.lower(): m for m in migs}
    out = []
    for ordinal, entry in enumerate(entries):
        mig = by_uuid.get(entry.lower())
        if mig is None or mig.memory_total_mib is None:
            break
        free = (mig.memory_total_mib - (mig.memory_used_mib or 0.0)) * MIB
        out.append(GpuInfo(ordinal, mig.name, int(mig.memory_total_mib * MIB), int(free),
                           mig.uuid))
    return out


def model_bytes(model_cfg: ModelConfig) -> int:
    """Weight bytes of the model in the dtype it will load in (bf16 on GPUs)."""
    config_path: Path | None = None
    if model_cfg.model in TEST_MODELS:
        from chord_core.testing.checkpoints import ensure_test_model

        config_path = ensure_test_model(model_cfg.cache_dir,
                                        TEST_MODELS[model_cfg.model]) / "config.json"
    elif Path(model_cfg.model).expanduser().is_dir():
        config_path = Path(model_cfg.model).expanduser() / "config.json"
    else:
        from chord_core.model.hub import local_snapshot

        snap = local_snapshot(model_cfg.model)
        config_path = snap / "config.json" if snap else None
    bytes_per = DTYPE_BYTES.get(model_cfg.dtype, 2)
    return model_params(model_cfg.model, config_path) * bytes_per


def plan_workers(model_cfg: ModelConfig, parallel: ParallelConfig, *,
                 inventory: list[GpuInfo] | None = None, reason: str = "",
                 parent_visible: Any = ...) -> WorkerPlan:
    """Decide the workers. ``inventory`` None = ask NVML; ``parent_visible`` (default: this
    process's ``CUDA_VISIBLE_DEVICES``) — tests pass made-up ones."""
    if inventory is None:
        inventory, reason = ([], "CPU workers requested") if parallel.cpu_workers else \
            gpu_inventory()
    if parallel.gpus is not None and inventory:
        seen = {g.index for g in inventory}
        missing = [i for i in parallel.gpus if i not in seen]
        if missing:
            raise ConfigError(f"GPU {missing[0]} is not visible (visible: "
                              f"{', '.join(str(i) for i in sorted(seen))})",
                              hint="number GPUs as nvidia-smi does, or as they appear in "
                                   "CUDA_VISIBLE_DEVICES when it is set (the first is 0)")
        inventory = [g for g in inventory if g.index in parallel.gpus]
    if parallel.num_gpus is not None:
        inventory = inventory[:parallel.num_gpus]
    model_cfg = replace(model_cfg, batch_size=parallel.batch_size_per_gpu)
    if not inventory or model_cfg.device == "cpu":
        n = max(1, parallel.cpu_workers)
        threads = max(1, (os.cpu_count() or 1) // n)
        specs = tuple(cpu_specs(n, model_cfg, threads=threads))
        why = reason or "CPU requested"
        return WorkerPlan(specs, {s.worker_id: 1.0 for s in specs}, None,
                          (f"{n} CPU worker(s), {threads} thread(s) each ({why})",))
    size = model_bytes(model_cfg)
    plan = plan_gpus(size, inventory, strategy=parallel.strategy,
                     max_memory_fraction=parallel.max_memory_fraction,
                     reserve_bytes=parallel.reserve_bytes)
    visible = (env_value("CUDA_VISIBLE_DEVICES") or None) if parent_visible is ... \
        else parent_visible
    specs = tuple(gpu_specs(plan.groups, model_cfg, parallel.max_memory_fraction,
                            parent_visible=visible,
                            uuids={g.index: g.uuid for g in inventory if g.uuid}))
    weights = {s.worker_id: sum(parallel.weight(d) for d in s.devices) / len(s.devices)
               for s in specs}
    names = {g.index: g.name for g in inventory}
    lines = [f"model {model_cfg.model}: ≈ {size / GIB:.1f} GiB of weights, "
             f"≈ {plan.need_bytes / GIB:.1f} GiB with working memory",
             f"strategy {plan.strategy}: {plan.explanation}", describe_visible(visible)]
    lines += [f"worker {s.worker_id}: " + ", ".join(f"cuda:{d} {names.get(d, '')}".strip()
                                                   for d in s.devices)
              + f" (CUDA_VISIBLE_DEVICES={s.visible} in the worker)" for s in specs]
    if plan.unused:
        lines.append(f"unused GPUs: {', '.join(map(str, plan.unused))}")
    return WorkerPlan(specs, weights, plan, tuple(lines) + tuple(parallel.report()))


EXECUTORS = ("local", "ray")


def start_manager(model_cfg: ModelConfig, parallel: ParallelConfig, *,
                  store: JobStore | StoreView | None = None,
                  worker_plan: WorkerPlan | None = None, executor: str = "local",
                  ray_address: str | None = "auto", resume: bool = True,
                  worker_env: Mapping[str, str] | None = None
                  ) -> tuple[JobManager, WorkerPlan]:
    """Plan, then start a JobManager: one local process per planned worker, or (``executor``
    "ray") one Ray actor per worker on the cluster at ``ray_address``. ``store``: the job
    store it writes (a reader's ``StoreView``: the store under it; the manager is its one
    writer, the view's holder keeps reading through it). ``worker_env``: settings each
    worker's process takes on (``WorkerSpec.env``; this process's environment unchanged)."""
    env = tuple(sorted((worker_env or {}).items()))
    from chord_core.gpus.devices import apply_device_order
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.store_read import writable

    if executor == "ray":
        return _start_on_ray(model_cfg, parallel, store=writable(store), address=ray_address,
                             env=env)
    if executor != "local":
        raise ConfigError(f"unknown executor {executor!r}",
                          hint=f"use one of: {', '.join(EXECUTORS)}")
    # Workers inherit the device order: GPU numbers in CUDA_VISIBLE_DEVICES then mean in them
    # what they mean to NVML here (PCI bus order), unless the user chose another order.
    apply_device_order()
    wp = worker_plan or plan_workers(model_cfg, parallel)
    if env:
        wp = replace(wp, specs=tuple(replace(s, env=env) for s in wp.specs))
    for line in wp.lines:
        log.info("%s", line)
    manager = JobManager(list(wp.specs), weights=wp.weights, store=writable(store),
                         resume=resume)
    return manager, wp


def _start_on_ray(model_cfg: ModelConfig, parallel: ParallelConfig, *,
                  store: JobStore | None, address: str | None,
                  env: tuple[tuple[str, str], ...] = ()) -> tuple[JobManager, WorkerPlan]:
    try:
        from chord_core.runtime.ray_executor import RayExecutor, ray_worker_specs
    except ImportError as exc:  # pragma: no cover — ray is in requirements.txt
        raise ConfigError(f"Ray is not installed ({exc})",
                          hint="pip install -r requirements.txt") from None
    from chord_core.runtime.manager import JobManager

    try:
        executor = RayExecutor(address)
    except ConnectionError as exc:
        raise ConfigError(f"no Ray cluster at {address}: {exc}",
                          hint="start one with `ray start --head` (and `ray start --address "
                               "HEAD:6379` on the other nodes), or pass --ray-address") from None
    nodes = executor.nodes()
    specs = [replace(s, env=env) for s in ray_worker_specs(model_cfg, parallel, nodes)]
    weights = {s.worker_id: parallel.gpu_weights.get(i, 1.0) for i, s in enumerate(specs)}
    lines = (f"Ray cluster: {len(nodes)} node(s), "
             f"{sum(n['cpus'] for n in nodes):g} CPU(s), {sum(n['gpus'] for n in nodes):g} GPU(s)",
             f"{len(specs)} Ray worker(s): " + ", ".join(
                 f"{s.worker_id} ({len(s.devices)} GPU)" if s.devices else s.worker_id
                 for s in specs))
    for line in lines:
        log.info("%s", line)
    manager = JobManager(specs, weights=weights, store=store, executor=executor)
    return manager, WorkerPlan(tuple(specs), weights, None, lines + tuple(parallel.report()))


def in_process_manager(model_cfg: ModelConfig, *, store: JobStore | StoreView | None = None,
                       resume: bool = True, executor: Executor | None = None,
                       worker_id: str = "thread0") -> JobManager:
    """A JobManager whose one worker is a thread of this process, running ``model_cfg`` as
    given (device included): for tools and tests that want no worker processes. ``resume``
    False: the store's queued jobs are left to whoever queued them (a long-video CLI run).
    ``executor``: a ``ThreadExecutor`` of one's own (an engine factory of the CLI's)."""
    from chord_core.runtime.executors import ThreadExecutor
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.store_read import writable

    spec = WorkerSpec(worker_id, (), model_cfg, warmup=False, in_process=True)
    return JobManager([spec], store=writable(store), split_ground=False,
                      executor=executor or ThreadExecutor(), resume=resume)
