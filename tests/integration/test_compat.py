"""The original documents' API names, each running the real engine with the tiny model."""

from __future__ import annotations

import json

import pytest
import torch

from chord_core.compat import (
    ChordVideoAnalyzer,
    GPUMonitor,
    MultiGPUPipeline,
    VideoParallelProcessor,
)
from chord_core.errors import ConfigError
from chord_core.gpus.nvml import GpuSample
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow

YAML = """
parallel:
  strategy: data_parallel
  num_gpus: 2
  batch_size_per_gpu: 2
  gradient_accumulation_steps: 2
  cpu_workers: 2
memory:
  max_memory_allocated: 0.9
  pin_memory: true
communication:
  backend: nccl
  timeout: 1800
"""


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    d = tmp_path_factory.mktemp("compat")
    return [str(make_video(d / f"v{i}.mp4", duration_s=1.5, fps=10.0, size_wh=(128, 96),
                           seed=i).path) for i in range(3)]


def test_chord_video_analyzer_runs_engine(tiny_model_dir, clips):
    analyzer = ChordVideoAnalyzer("test", device="cpu", torch_dtype=torch.float32)
    result = analyzer.describe(clips[0], max_new_tokens=128)
    assert result.model.test_model and result.model.dtype == "float32"
    assert result.model.device_map == {"": "cpu"}
    grounded = analyzer.ground(clips[0], "the green square")
    assert len(grounded.raw_outputs) == grounded.sampling.num_frames


def test_chord_video_analyzer_rejects_bad_dtype():
    with pytest.raises(ConfigError):
        ChordVideoAnalyzer("test", torch_dtype="int8")


def test_multi_gpu_pipeline_from_yaml(tiny_model_dir, clips, tmp_path, monkeypatch):
    for var in ("CHORD_CPU_WORKERS", "CHORD_STRATEGY", "CHORD_NUM_GPUS", "CHORD_GPUS"):
        monkeypatch.delenv(var, raising=False)  # the YAML alone decides here
    cfg = tmp_path / "multigpu_config.yaml"
    cfg.write_text(YAML)
    with MultiGPUPipeline(config=cfg, model="test") as pipe:
        assert pipe.parallel.strategy == "replicate"
        assert any("gradient_accumulation_steps" in k for k in pipe.parallel.ignored)
        for c in clips:
            pipe.load_video(c)
        results = pipe.analyze(task="describe", max_new_tokens=128)
        assert [r.video.path for r in results] == clips
        assert len(pipe.plan.specs) == 2  # two CPU workers from the YAML
        ratio = pipe.get_speedup_ratio()
        assert 0 < ratio <= 2.05
        out = pipe.save_results(tmp_path / "out.json")
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == 3 and doc["speedup"] == pytest.approx(ratio)


def test_video_parallel_processor_weights_async_and_cost(tiny_model_dir, clips):
    vpp = VideoParallelProcessor(gpu_weights={0: 1.0, 1: 0.8}, async_mode=True, queue_size=2,
                                 cpu_workers=1, model="test")
    try:
        vpp.set_gpu_affinity([0.6, 0.4])
        assert vpp.parallel.gpu_weights == {0: 0.6, 1: 0.4}
        vpp.enable_auto_balancing(check_interval=30, adjustment_factor=0.1)
        ids = vpp.process(clips[:2])
        assert all(isinstance(i, str) for i in ids)
        assert [vpp.result(i).video.path for i in ids] == clips[:2]
        with pytest.raises(ConfigError):
            vpp.enable_auto_balancing(adjustment_factor=0)
    finally:
        vpp.close()
    cost = VideoParallelProcessor.estimate_cost(clips[0])
    assert cost == pytest.approx(1.5 * (128 * 96 / 1e6) * (10 / 30), rel=0.05)


class FakeSampler:
    """Boundary fake for the NVML sampler: delivers two GPUs' samples to subscribers."""

    def __init__(self) -> None:
        self.subs, self.started, self.available = [], False, True

    def subscribe(self, cb):
        self.subs.append(cb)

    def unsubscribe(self, cb):
        self.subs.remove(cb)
        return True

    def start(self):
        self.started = True
        for cb in self.subs:
            cb([GpuSample(0.0, i, i, "NVIDIA H200", f"GPU-{i}", 40.0 + i, 1000.0, 143771.0,
                          35.0, 100.0, 700.0, ()) for i in range(2)])

    def stop(self):
        self.started = False

    def latest(self):
        return []


def test_gpu_monitor_callback_gets_indexable_stats():
    got = []
    mon = GPUMonitor(update_interval=5, sampler=FakeSampler())
    mon.start_monitoring(got.append)
    assert got and got[0][0]["utilization"] == 40.0 and got[0][1]["utilization"] == 41.0
    assert got[0][0]["memory_total"] == 143771.0
    mon.stop_monitoring()
    assert not mon.sampler.subs and not mon.sampler.started


def test_gpu_monitor_real_sampler_without_gpus_reports_reason():
    mon = GPUMonitor(update_interval=0.2)
    got = []
    mon.start_monitoring(got.append)
    try:
        import time

        time.sleep(0.5)
        if not mon.available:
            assert mon.sampler.reason
            assert mon.sampler.system_latest() is not None
    finally:
        mon.stop_monitoring()
