"""Every code snippet of the original documents' multi-GPU and deployment guides, run as
written (with the test model, on CPU workers where no GPU is present). Where a name could not
exist as written, README's "Original API names" table maps it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from chord_core.gpus.nvml import GpuSample
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def workdir(tmp_path, monkeypatch, tiny_model_dir):
    for var in ("CHORD_CPU_WORKERS", "CHORD_STRATEGY", "CHORD_NUM_GPUS", "CHORD_GPUS",
                "CHORD_GPU_WEIGHTS", "CHORD_BATCH_SIZE", "CHORD_MAX_MEMORY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CHORD_MODEL", "test")
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    shutil.copy(ROOT / "multigpu_config.yaml", tmp_path / "multigpu_config.yaml")
    make_video(tmp_path / "video.mp4", duration_s=1.5, fps=10.0, size_wh=(128, 96))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_deployment_guide_single_analyzer(workdir) -> None:
    from chord_inference import ChordVideoAnalyzer

    analyzer = ChordVideoAnalyzer(device_map="auto", max_memory={0: "20GB", 1: "20GB"},
                                  torch_dtype=torch.float32)
    result = analyzer.analyze("video.mp4", task="describe", max_new_tokens=128)
    assert result.model.test_model and result.model.device_map == {"": "cpu"}
    boxes = analyzer.ground("video.mp4", "the green square")
    assert len(boxes.raw_outputs) == boxes.sampling.num_frames


def test_multigpu_guide_pipeline_with_edited_config(workdir) -> None:
    from chord_parallel import MultiGPUPipeline, load_config

    config = load_config("multigpu_config.yaml")
    config["parallel"]["num_gpus"] = 4
    pipeline = MultiGPUPipeline(config=config)
    assert pipeline.parallel.num_gpus == 4  # the edit took effect
    config["parallel"]["num_gpus"] = 2  # the pipeline keeps its own copy
    assert pipeline.parallel.num_gpus == 4
    pipeline.config["parallel"]["batch_size_per_gpu"] = 2  # edits before start count
    assert pipeline.parallel.batch_size_per_gpu == 2
    reported = "\n".join(pipeline.parallel.report())
    assert "socket_timeout" in reported and "pin_memory" in reported  # said to be ignored
    pipeline.set_gpu_affinity([0.6, 0.4])
    assert pipeline.parallel.gpu_weights == {0: 0.6, 1: 0.4}
    with pipeline:
        pipeline.load_video("video.mp4")
        results = pipeline.analyze(task="describe", max_new_tokens=128)
        pipeline.save_results("results.json")
        ratio = pipeline.get_speedup_ratio()
        print(f"speed-up: {ratio:.2f}x")
        assert "not measured against one GPU" in pipeline.speedup_kind
        pipeline.set_baseline(pipeline._wall_s * 2)
        assert pipeline.get_speedup_ratio() == pytest.approx(2.0)
        assert pipeline.speedup_kind == "against one GPU (measured)"
    assert len(results) == 1 and results[0].task == "describe"
    doc = json.loads(Path("results.json").read_text())
    assert doc["speedup_kind"] and doc["busy_over_wall"] == pytest.approx(ratio)


def test_multigpu_guide_processor_balancing(workdir) -> None:
    from chord_parallel import VideoParallelProcessor

    processor = VideoParallelProcessor(config_path="multigpu_config.yaml",
                                       gpu_weights={0: 1.0, 1: 0.8})
    processor.enable_auto_balancing(check_interval=30, adjustment_factor=0.1)
    assert processor.check_interval == 30.0
    processor.enable_dynamic_balancing(sensitivity=0.2, max_adjustment=0.3)
    assert (processor.adjustment_factor, processor.max_adjustment) == (0.2, 0.3)
    shares = processor.adjust_load_balancing(shift_ratio=0.1)
    assert shares == pytest.approx({0: 1.08, 1: 0.72})  # a tenth of GPU 1's share moved
    assert processor.parallel.gpu_weights == pytest.approx({0: 1.08, 1: 0.72})
    with pytest.raises(Exception, match="shift_ratio"):
        processor.adjust_load_balancing(shift_ratio=1.5)
    with processor:
        ids = [processor.submit("video.mp4")]
        assert processor.result(ids[0]).video.path.endswith("video.mp4")
        balancer = processor._manager.balancer
        assert (balancer.ema, balancer.max_correction) == (0.2, 0.3)


class _Sampler:
    """Boundary fake for NVML: two H200s, delivered to subscribers on start."""

    available = True

    def __init__(self) -> None:
        self.subs: list = []

    def subscribe(self, cb) -> None:
        self.subs.append(cb)

    def unsubscribe(self, cb) -> bool:
        self.subs.remove(cb)
        return True

    def start(self) -> None:
        for cb in self.subs:
            cb([GpuSample(0.0, i, i, "NVIDIA H200", f"GPU-{i}", 50.0 + i, 1000.0, 143771.0)
                for i in range(2)])

    def stop(self) -> None:
        pass

    def latest(self) -> list:
        return []


def test_monitoring_guide_gpu_monitor() -> None:
    from chord_monitor import GPUMonitor

    seen: list[float] = []
    monitor = GPUMonitor(update_interval=5, sampler=_Sampler())
    monitor.start_monitoring(lambda stats: seen.append(stats[0]["utilization"]))
    monitor.stop_monitoring()
    assert seen == [50.0]
