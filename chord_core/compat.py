"""The Python API under the names the original Chord design documents use.

Thin, documented wrappers over the engine — no second implementation:

| original name            | runs on                                                  |
|--------------------------|----------------------------------------------------------|
| ``ChordVideoAnalyzer``   | ``Engine`` (one model, in this process)                  |
| ``MultiGPUPipeline``     | ``cluster.start_manager`` + ``batch``-style job fan-out  |
| ``VideoParallelProcessor`` | the same manager, with ``gpu_weights`` / affinity and the balancer's auto-correction |
| ``GPUMonitor``           | the shared ``gpu.GpuSampler``                            |

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

import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from chord_core.config import (
    MAX_NEW_TOKENS_DEFAULT,
    ModelConfig,
    SamplingConfig,
    model_config_from_env,
)
from chord_core.engine import AnalysisRequest, Engine
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
    ``device_map="auto"`` (default) spreads it over the visible GPUs within ``max_memory``
    (e.g. ``{0: "20GB", 1: "20GB"}`` or a fraction ``0.9``)."""

    def __init__(self, model: str | None = None, *, device_map: str = "auto",
                 max_memory: Mapping[Any, Any] | str | float | None = None,
                 torch_dtype: Any = None, device: str | None = None,
                 batch_size: int = 8, allow_offload: bool = False) -> None:
        if device_map not in ("auto", "cpu"):
            raise ConfigError(f"device_map {device_map!r} is not supported here",
                              hint='use device_map="auto" or device="cuda:N" / "cpu"')
        cfg = model_config_from_env(model=model, max_memory=max_memory,
                                    dtype=_dtype_name(torch_dtype),
                                    device=device or device_map)
        self.engine = Engine(ModelConfig(**{**cfg.__dict__, "batch_size": batch_size,
                                            "allow_offload": allow_offload}))

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

    def __init__(self, config: str | Path | None = None, num_gpus: int | None = None, *,
                 model: str | None = None, cpu_workers: int | None = None,
                 gpu_weights: Mapping[int, float] | None = None) -> None:
        from chord_core.parallel_config import load_parallel_config

        self.parallel = load_parallel_config(config, overrides={
            "num_gpus": num_gpus, "cpu_workers": cpu_workers,
            "gpu_weights": dict(gpu_weights) if gpu_weights else None})
        self.model_cfg = model_config_from_env(model=model)
        self.videos: list[VideoInfo] = []
        self.results: list[Result] = []
        self.errors: list[dict] = []
        self._manager: Any = None
        self.plan: Any = None
        self._busy_s = 0.0
        self._wall_s = 0.0

    def load_video(self, path: str | Path) -> VideoInfo:
        """Check a clip (probe) and add it to the work list."""
        from chord_core.video import probe

        info = probe(path)
        self.videos.append(info)
        return info

    def _start(self) -> Any:
        if self._manager is None:
            from chord_core.cluster import start_manager

            self._manager, self.plan = start_manager(self.model_cfg, self.parallel)
            self._manager.wait_ready()
        return self._manager

    def analyze(self, task: str = "describe", query: str = "", *,
                max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT, timeout: float | None = None
                ) -> list[Result]:
        """Run every loaded clip; returns results in load order (failures in ``errors``)."""
        from chord_core.jobs import JobSpec, JobState

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
               "speedup": self.get_speedup_ratio(), "wall_s": self._wall_s,
               "plan": self.plan.to_dict() if self.plan else None}
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def get_speedup_ratio(self) -> float:
        """Σ worker busy time / wall time of the last ``analyze`` (≈ GPUs kept busy)."""
        return self._busy_s / self._wall_s if self._wall_s > 0 else 0.0

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
    ``enable_auto_balancing`` lets measured throughput correct those shares (the balancer does
    this after every finished task; ``check_interval`` is accepted for compatibility).
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
        self._pending: list[str] = []

    def set_gpu_affinity(self, shares: Sequence[float]) -> None:
        """Shares per GPU in order (``[0.6, 0.4]``); takes effect for workers started next."""
        if not shares or any(s <= 0 for s in shares):
            raise ConfigError(f"GPU affinity shares must be positive, got {list(shares)}",
                              hint="e.g. set_gpu_affinity([0.6, 0.4])")
        from dataclasses import replace

        self.parallel = replace(self.parallel, gpu_weights={i: float(s)
                                                            for i, s in enumerate(shares)})

    def enable_auto_balancing(self, check_interval: float = 30, adjustment_factor: float = 0.1
                              ) -> None:
        if not 0 < adjustment_factor <= 1:
            raise ConfigError(f"adjustment_factor must be in (0, 1], got {adjustment_factor}",
                              hint="e.g. 0.1")
        self.auto_balancing, self.adjustment_factor = True, adjustment_factor
        self.check_interval = check_interval
        if self._manager is not None:
            self._manager.set_auto_balancing(adjustment_factor)

    def _start(self) -> Any:
        manager = super()._start()
        manager.set_auto_balancing(self.adjustment_factor if self.auto_balancing else 0.0)
        return manager

    def submit(self, video: str | Path, task: str = "describe", query: str = "") -> str:
        from chord_core.jobs import JobSpec

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
        from chord_core.balancer import legacy_cost
        from chord_core.video import probe

        return legacy_cost(probe(video))


class GPUMonitor:
    """``GPUMonitor(update_interval=5).start_monitoring(callback)``: ``callback(stats)`` gets
    one entry per GPU, ``stats[0]["utilization"]`` (percent), ``stats[0]["memory_used"]`` /
    ``["memory_total"]`` (MiB), ``["temperature"]``, ``["power"]`` — None where unsupported."""

    def __init__(self, update_interval: float = 5.0, *, sampler: Any = None) -> None:
        from chord_core.gpu import GpuSampler

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
