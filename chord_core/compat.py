"""The Python API under the names the original Chord design documents use.

Thin, documented wrappers over the engine — no second implementation:

| original name            | runs on                                                  |
|--------------------------|----------------------------------------------------------|
| ``ChordVideoAnalyzer``   | ``Engine`` (one model, in this process)                  |
| ``MultiGPUPipeline``     | ``cluster.start_manager`` + ``batch``-style job fan-out  |
| ``VideoParallelProcessor`` | the same manager, with ``gpu_weights`` / affinity and the balancer's auto-correction |
| ``GPUMonitor``           | the shared ``gpu.GpuSampler``                            |

The original import paths are modules at the top level: ``chord_inference``
(``ChordVideoAnalyzer``), ``chord_parallel`` (``MultiGPUPipeline``, ``VideoParallelProcessor``,
``load_config``) and ``chord_monitor`` (``GPUMonitor``).

Example::

    analyzer = ChordVideoAnalyzer(device_map="auto", max_memory={0: "20GB", 1: "20GB"},
                                  torch_dtype=torch.bfloat16)
    result = analyzer.ground("clip.mp4", "the red car")

    pipe = MultiGPUPipeline(config="multigpu_config.yaml", num_gpus=2)
    pipe.load_video("a.mp4"); pipe.load_video("b.mp4")
    results = pipe.analyze(task="describe")
    pipe.save_results("out.json"); print(pipe.get_speedup_ratio())
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from chord_core.analysis.engine import Engine
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    SamplingConfig,
    model_config_from_env,
)
from chord_core.errors import ConfigError, ResourceError
from chord_core.types import Result, VideoInfo


def _dtype_name(torch_dtype: Any) -> str:
    if torch_dtype is None:
        return "auto"
    name = str(torch_dtype).replace("torch.", "")
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
               "float": "float32"}
    name = aliases.get(name, name)
    if name not in ("auto", "bfloat16", "float16", "float32"):
        raise ConfigError(f"unsupported torch_dtype {torch_dtype!r}",
                          hint="use torch.bfloat16, torch.float16 or torch.float32")
    return name


class ChordVideoAnalyzer:
    """One model in this process. ``device="cuda:0"`` pins it to one GPU;
    ``device_map="auto"`` (default) lets Chord place it: one GPU when it fits within
    ``max_memory`` (e.g. ``{0: "20GB", 1: "20GB"}`` or a fraction ``0.9``), else the fewest
    GPUs. ``strategy="shard"``, a device-map dict or ``"balanced"``/``"sequential"`` spread it
    as asked."""

    def __init__(self, model: str | None = None, *, device_map: Any = "auto",
                 max_memory: Mapping[Any, Any] | str | float | None = None,
                 torch_dtype: Any = None, device: str | None = None,
                 batch_size: int = 8, allow_offload: bool = False,
                 strategy: str | None = None) -> None:
        explicit = None if device_map in ("auto", "cpu") else device_map
        cfg = model_config_from_env(model=model, max_memory=max_memory,
                                    dtype=_dtype_name(torch_dtype), strategy=strategy,
                                    device=device or ("cpu" if device_map == "cpu" else None))
        self.engine = Engine(replace(cfg, batch_size=batch_size, allow_offload=allow_offload,
                                     device_map=explicit))

    @property
    def model_info(self) -> Any:
        return self.engine.load().info

    def analyze(self, video: str | Path, task: str = "describe", query: str = "", *,
                max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT,
                sampling: SamplingConfig | None = None) -> Result:
        return self.engine.analyze(AnalysisRequest(str(video), task, query,
                                                   sampling or SamplingConfig(), max_new_tokens))

    def describe(self, video: str | Path, prompt: str = "", **kw: Any) -> Result:
        return self.analyze(video, "describe", prompt, **kw)

    def ground(self, video: str | Path, target: str, **kw: Any) -> Result:
        return self.analyze(video, "ground", target, **kw)


class MultiGPUPipeline:
    """Many clips over all GPUs (one worker per GPU group, per the config's strategy).
    Workers start on the first ``analyze`` and stay up until ``close()``."""

    def __init__(self, config: str | Path | Mapping[str, Any] | None = None,
                 num_gpus: int | None = None, *, model: str | None = None,
                 cpu_workers: int | None = None,
                 gpu_weights: Mapping[int, float] | None = None) -> None:
        from chord_core.runtime.parallel_config import read_config_dict

        # ``config`` is a plain nested dict, editable as the original documents do
        # (``pipe.config["parallel"]["num_gpus"] = 4``) until the workers start.
        if isinstance(config, Mapping):
            self.config: dict[str, Any] = copy.deepcopy(dict(config))
        else:
            self.config = read_config_dict(config) if config is not None else {}
        self._overrides: dict[str, Any] = {
            "num_gpus": num_gpus, "cpu_workers": cpu_workers,
            "gpu_weights": dict(gpu_weights) if gpu_weights else None}
        self.parallel  # noqa: B018 — validate now, not at the first analyze
        self.model_cfg = model_config_from_env(model=model)
        self.videos: list[VideoInfo] = []
        self.results: list[Result] = []
        self.errors: list[dict] = []
        self._manager: Any = None
        self.plan: Any = None
        self._busy_s = 0.0
        self._wall_s = 0.0
        self.baseline_wall_s: float | None = None

    @property
    def parallel(self) -> Any:
        """The validated settings: ``config`` < environment < constructor arguments."""
        from chord_core.runtime.parallel_config import load_parallel_config

        return load_parallel_config(self.config or None, overrides=self._overrides)

    def set_gpu_affinity(self, shares: Sequence[float] | Mapping[int, float]) -> None:
        """Each GPU's share of the work: ``[0.6, 0.4]`` (in GPU order) or ``{0: 0.6, 1: 0.4}``.
        Applies to running workers at once and to workers started later."""
        items = dict(shares) if isinstance(shares, Mapping) else dict(enumerate(shares))
        if not items or any(not isinstance(v, (int, float)) or v <= 0 for v in items.values()):
            raise ConfigError(f"GPU affinity shares must be positive, got {shares!r}",
                              hint="e.g. set_gpu_affinity([0.6, 0.4])")
        self._overrides["gpu_weights"] = {int(k): float(v) for k, v in items.items()}
        if self._manager is not None:
            self._apply_weights(self._overrides["gpu_weights"])

    def _apply_weights(self, by_gpu: Mapping[int, float]) -> None:
        weights = {w["worker"]: sum(by_gpu.get(d, 1.0) for d in w["devices"]) /
                   len(w["devices"]) for w in self._manager.workers() if w["devices"]}
        self._manager.balancer.set_weights(weights)

    def load_video(self, path: str | Path) -> VideoInfo:
        """Check a clip (probe) and add it to the work list."""
        from chord_core.media.probe import probe

        info = probe(path)
        self.videos.append(info)
        return info

    def _start(self) -> Any:
        if self._manager is None:
            from chord_core.runtime.cluster import start_manager

            self._manager, self.plan = start_manager(self.model_cfg, self.parallel)
            self._manager.wait_ready()
        return self._manager

    def analyze(self, task: str = "describe", query: str = "", *,
                max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT, timeout: float | None = None
                ) -> list[Result]:
        """Run every loaded clip; returns results in load order (failures in ``errors``)."""
        from chord_core.runtime.jobs import JobSpec, JobState

        if not self.videos:
            raise ConfigError("no video loaded", hint="call load_video(path) first")
        manager = self._start()
        busy0 = sum(w["busy_s"] for w in manager.workers())
        t0 = time.time()
        ids = [manager.submit(JobSpec(AnalysisRequest(v.path, task, query,
                                                      max_new_tokens=max_new_tokens)))
               for v in self.videos]
        finals = [manager.wait(i, timeout) for i in ids]
        self._wall_s = time.time() - t0
        self._busy_s = sum(w["busy_s"] for w in manager.workers()) - busy0
        self.results = [f.result for f in finals if f.state is JobState.DONE]
        self.errors = [{"video": f.spec.request.video_path, **(f.error or {})}
                       for f in finals if f.state is not JobState.DONE]
        return self.results

    def save_results(self, path: str | Path) -> Path:
        path = Path(path)
        doc = {"results": [r.to_dict() for r in self.results], "errors": self.errors,
               "speedup": self.get_speedup_ratio(), "speedup_kind": self.speedup_kind,
               "busy_over_wall": self.busy_over_wall(), "wall_s": self._wall_s,
               "baseline_wall_s": self.baseline_wall_s,
               "plan": self.plan.to_dict() if self.plan else None}
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def get_speedup_ratio(self) -> float:
        """The speed-up of the last ``analyze`` against one GPU — one-GPU wall time / wall
        time — when the one-GPU time is known (``measure_baseline`` or ``set_baseline``).
        Otherwise Σ worker busy time / wall time, which says how many workers were kept busy,
        not how much faster it was: ``speedup_kind`` tells which one this is."""
        if self.baseline_wall_s is not None and self._wall_s > 0:
            return self.baseline_wall_s / self._wall_s
        return self.busy_over_wall()

    @property
    def speedup_kind(self) -> str:
        if self.baseline_wall_s is not None and self._wall_s > 0:
            return "against one GPU (measured)"
        return "workers kept busy (sum of busy time / wall time), not measured against one GPU"

    def busy_over_wall(self) -> float:
        return self._busy_s / self._wall_s if self._wall_s > 0 else 0.0

    def set_baseline(self, one_gpu_wall_s: float) -> None:
        """The wall time the same clips take on one GPU, if you measured it yourself."""
        if not one_gpu_wall_s > 0:
            raise ConfigError(f"the one-GPU time must be positive, got {one_gpu_wall_s!r}",
                              hint="give seconds, e.g. set_baseline(120.0)")
        self.baseline_wall_s = float(one_gpu_wall_s)

    def measure_baseline(self, task: str = "describe", query: str = "", *,
                         max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT) -> float:
        """Run the loaded clips on one worker (one GPU, or one CPU worker where no GPU is
        used) and keep its wall time as the baseline for ``get_speedup_ratio``."""
        single = dict(self._overrides, num_gpus=1, gpu_weights=None)
        if self.parallel.cpu_workers:
            single["cpu_workers"] = 1
        one = MultiGPUPipeline(self.config or None, model=self.model_cfg.model,
                               **{k: single[k] for k in ("num_gpus", "cpu_workers")})
        with one:
            one.videos = list(self.videos)
            one.analyze(task, query, max_new_tokens=max_new_tokens)
            self.baseline_wall_s = one._wall_s
        return self.baseline_wall_s

    def close(self) -> None:
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None

    def __enter__(self) -> MultiGPUPipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class VideoParallelProcessor(MultiGPUPipeline):
    """The original documents' processor: weighted GPUs, auto-balancing, async submission.

    ``gpu_weights`` ({0: 1.0, 1: 0.8}) or ``set_gpu_affinity([0.6, 0.4])`` set each GPU's share;
    ``enable_auto_balancing(check_interval, adjustment_factor)`` lets measured throughput
    correct those shares every ``check_interval`` seconds; ``enable_dynamic_balancing``
    corrects after every clip within ±``max_adjustment``; ``adjust_load_balancing(shift_ratio)``
    moves a share from the slowest GPU to the fastest by hand.
    ``async_mode=True``: ``submit`` returns a job id at once, ``result(job_id)`` waits."""

    def __init__(self, config_path: str | Path | None = None, *,
                 gpu_weights: Mapping[int, float] | None = None, async_mode: bool = False,
                 queue_size: int = 100, timeout: float = 300.0, model: str | None = None,
                 cpu_workers: int | None = None) -> None:
        super().__init__(config_path, model=model, cpu_workers=cpu_workers,
                         gpu_weights=gpu_weights)
        self.async_mode, self.queue_size, self.timeout = async_mode, queue_size, timeout
        self.auto_balancing = False
        self.adjustment_factor = 0.0
        self.check_interval = 0.0
        self.max_adjustment = 0.0
        self._pending: list[str] = []

    def enable_auto_balancing(self, check_interval: float = 30, adjustment_factor: float = 0.1
                              ) -> None:
        """Let measured throughput correct the GPUs' shares, recomputed at most every
        ``check_interval`` seconds, each time by ``adjustment_factor`` of the difference."""
        if not 0 < adjustment_factor <= 1:
            raise ConfigError(f"adjustment_factor must be in (0, 1], got {adjustment_factor}",
                              hint="e.g. 0.1")
        if not check_interval >= 0:
            raise ConfigError(f"check_interval must be ≥ 0 seconds, got {check_interval}",
                              hint="e.g. 30")
        self.auto_balancing, self.adjustment_factor = True, adjustment_factor
        self.check_interval = float(check_interval)
        self._push_balancing()

    def enable_dynamic_balancing(self, sensitivity: float = 0.1, max_adjustment: float = 0.3
                                 ) -> None:
        """Correct shares after every finished clip: ``sensitivity`` is how much of the
        measured difference each correction takes (0–1), ``max_adjustment`` how far a GPU's
        share may move from its configured weight (0.3 = ±30 %)."""
        if not 0 < sensitivity <= 1:
            raise ConfigError(f"sensitivity must be in (0, 1], got {sensitivity}",
                              hint="e.g. 0.1")
        if not 0 < max_adjustment <= 1:
            raise ConfigError(f"max_adjustment must be in (0, 1], got {max_adjustment}",
                              hint="e.g. 0.3 (shares move at most ±30 %)")
        self.auto_balancing, self.adjustment_factor = True, sensitivity
        self.check_interval, self.max_adjustment = 0.0, float(max_adjustment)
        self._push_balancing()

    def adjust_load_balancing(self, shift_ratio: float = 0.1) -> dict[int, float]:
        """Move ``shift_ratio`` of the slowest GPU's share to the fastest one (by measured
        speed once clips have run, else by configured weight). Returns the new shares."""
        if not 0 < shift_ratio < 1:
            raise ConfigError(f"shift_ratio must be in (0, 1), got {shift_ratio}",
                              hint="e.g. 0.1 moves a tenth of the slowest GPU's share")
        shares = self._shares()
        if len(shares) < 2:
            return shares
        speeds = self._manager.workers() if self._manager is not None else []
        speed_of = {d: w["speed"] for w in speeds for d in w["devices"]}
        slow = min(shares, key=lambda g: (speed_of.get(g, shares[g]), -g))
        fast = max(shares, key=lambda g: (speed_of.get(g, shares[g]), -g))
        if slow != fast:
            moved = shares[slow] * shift_ratio
            shares[slow] -= moved
            shares[fast] += moved
        self.set_gpu_affinity(shares)
        return shares

    def _shares(self) -> dict[int, float]:
        if self._manager is not None:
            gpus = sorted({d for w in self._manager.workers() for d in w["devices"]})
        else:
            gpus = sorted(self.parallel.gpu_weights) or [0, 1]
        weights = self._overrides.get("gpu_weights") or self.parallel.gpu_weights
        return {g: float(weights.get(g, 1.0)) for g in gpus}

    def _push_balancing(self) -> None:
        if self._manager is not None:
            self._manager.balancer.set_adjustment(
                self.adjustment_factor if self.auto_balancing else 0.0,
                check_interval_s=self.check_interval, max_correction=self.max_adjustment)

    def _start(self) -> Any:
        started = self._manager is None
        manager = super()._start()
        if started:
            self._push_balancing()
        return manager

    def submit(self, video: str | Path, task: str = "describe", query: str = "") -> str:
        from chord_core.runtime.jobs import JobSpec

        manager = self._start()
        self._pending = [j for j in self._pending if not manager.status(j).state.finished]
        if len(self._pending) >= self.queue_size:
            raise ResourceError(f"the queue is full ({self.queue_size} jobs waiting)",
                                hint="wait for results, or raise queue_size")
        job_id = manager.submit(JobSpec(AnalysisRequest(str(video), task, query)))
        self._pending.append(job_id)
        return job_id

    def result(self, job_id: str) -> Result:
        st = self._start().wait(job_id, self.timeout)
        if st.result is None:
            raise ResourceError(f"job {job_id} ended {st.state.value}: "
                                f"{(st.error or {}).get('message', '')}",
                                hint=(st.error or {}).get("hint", ""))
        return st.result

    def process(self, videos: Sequence[str | Path], task: str = "describe", query: str = ""
                ) -> list[Result] | list[str]:
        ids = [self.submit(v, task, query) for v in videos]
        return ids if self.async_mode else [self.result(i) for i in ids]

    @staticmethod
    def estimate_cost(video: str | Path) -> float:
        """The original documents' estimate: duration × megapixels × (fps / 30)."""
        from chord_core.media.probe import probe
        from chord_core.runtime.balancer import legacy_cost

        return legacy_cost(probe(video))


class GPUMonitor:
    """``GPUMonitor(update_interval=5).start_monitoring(callback)``: ``callback(stats)`` gets
    one entry per GPU, ``stats[0]["utilization"]`` (percent), ``stats[0]["memory_used"]`` /
    ``["memory_total"]`` (MiB), ``["temperature"]``, ``["power"]`` — None where unsupported."""

    def __init__(self, update_interval: float = 5.0, *, sampler: Any = None) -> None:
        from chord_core.gpus.sampler import GpuSampler

        self.sampler = sampler or GpuSampler(interval_s=update_interval,
                                             history_s=max(300.0, update_interval * 2))
        self._callbacks: list[Callable[[list[Any]], None]] = []

    def start_monitoring(self, callback: Callable[[list[Any]], None] | None = None) -> None:
        if callback is not None:
            self._callbacks.append(callback)
            self.sampler.subscribe(callback)
        self.sampler.start()

    def stop_monitoring(self) -> None:
        for cb in self._callbacks:
            self.sampler.unsubscribe(cb)
        self._callbacks.clear()
        self.sampler.stop()

    def get_stats(self) -> list[Any]:
        return self.sampler.latest()

    @property
    def available(self) -> bool:
        return self.sampler.available
