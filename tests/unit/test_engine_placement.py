"""Where one in-process model goes (planner.place_engine) and what GPU numbers mean in
workers (devices.py), on made-up device inventories."""

from __future__ import annotations

import pytest

from chord_core.config import ModelConfig, engine_strategy
from chord_core.errors import ConfigError, ResourceError
from chord_core.gpus.devices import (
    GpuInfo,
    describe_visible,
    visible_entries,
    worker_visible,
)
from chord_core.model.planner import GIB, place_engine
from chord_core.runtime.cluster import plan_workers
from chord_core.runtime.parallel_config import ParallelConfig

H200 = 141 * GIB
W7B = int(15.4 * GIB)  # random-weight 7B in bf16; needs ≈ 18.5 GiB with the 1.2 headroom
W72B = int(136 * GIB)


def gpus(*free_gib: float, total: int = H200) -> list[GpuInfo]:
    return [GpuInfo(i, "NVIDIA H200", total, int(f * GIB), f"GPU-{i:04d}")
            for i, f in enumerate(free_gib)]


@pytest.mark.parametrize(("weights", "inventory", "caps", "strategy", "devices", "sharded"), [
    (W7B, gpus(140, 140), None, "auto", (0,), False),
    (W7B, gpus(10, 140), None, "auto", (1,), False),             # GPU 0 busy: the next one
    (W7B, gpus(140, 140), {0: 10 * GIB, 1: 30 * GIB}, "auto", (1,), False),  # caps count
    (W7B, gpus(12, 12, 12), None, "auto", (0, 1), True),           # fewest that hold it
    (W72B, gpus(100, 40, 100, 100), None, "auto", (0, 2), True),   # the two with most room
    (W7B, gpus(140, 140), None, "shard", (0, 1), True),            # asked for a shard
    (W7B, gpus(140, 140), None, "replicate", (0,), False),         # workers' name: one GPU
    (W72B, gpus(50, 50), None, "auto", (0, 1), True),              # too big: all, offload check
], ids=["fits-first", "first-is-busy", "caps-move-it", "shard-two-of-three",
        "72b-largest-budgets", "explicit-shard", "replicate-is-single", "too-big-spreads"])
def test_place_engine(weights, inventory, caps, strategy, devices, sharded) -> None:
    p = place_engine(weights, inventory, caps, strategy=strategy)
    assert p.devices == devices and p.sharded is sharded
    assert p.need_bytes == int(weights * 1.2)
    if sharded:  # accelerate uses exactly the GPUs named in max_memory
        assert p.device_map == "auto"
        assert sorted(k for k in p.max_memory if k != "cpu") == list(devices)
    else:
        assert p.device_map == {"": f"cuda:{devices[0]}"}
    assert p.reason


def test_caps_keep_their_meaning_when_sharded() -> None:
    caps = {0: 20 * GIB, 1: 30 * GIB, "cpu": 64 * GIB}
    p = place_engine(W72B, gpus(100, 100), caps, strategy="shard")
    assert p.max_memory == {0: 20 * GIB, 1: 30 * GIB, "cpu": 64 * GIB}
    single = place_engine(W7B, gpus(140, 140), {0: 25 * GIB, 1: 25 * GIB})
    assert single.devices == (0,) and single.max_memory == {0: 25 * GIB}


def test_single_that_does_not_fit_says_what_to_do() -> None:
    with pytest.raises(ResourceError) as err:
        place_engine(W72B, gpus(80, 80), None, strategy="single")
    assert "--strategy shard" in err.value.hint


def test_no_gpu_and_bad_strategy() -> None:
    with pytest.raises(ResourceError):
        place_engine(W7B, [], None)
    with pytest.raises(ConfigError):
        engine_strategy("pipelined-magic")
    assert engine_strategy("data_parallel") == "single"
    assert engine_strategy(None) == "auto"
    assert ModelConfig(strategy="model_parallel").strategy == "shard"


# -- device numbering ----------------------------------------------------------------------
UUIDS = {0: "GPU-aaaa", 1: "GPU-bbbb", 2: "GPU-cccc"}


@pytest.mark.parametrize(("ordinals", "parent", "want"), [
    ((0,), None, "GPU-aaaa"),              # unset: UUIDs, immune to device order
    ((1,), None, "GPU-bbbb"),
    ((0, 1), None, "GPU-aaaa,GPU-bbbb"),
    ((0,), "1", "1"),                      # the user's CUDA_VISIBLE_DEVICES=1 → physical 1
    ((1,), "2,3", "3"),                    # --gpus 1 under 2,3 → physical 3
    ((0, 1), "3,1", "3,1"),
    ((0,), "GPU-5e9b,GPU-84ef", "GPU-5e9b"),  # UUID entries pass through as written
    ((0,), "MIG-1234-abcd", "MIG-1234-abcd"),  # MIG instances too
    ((1,), " 0, 2 ", "2"),
    ((0,), "0,,1", "0"),                   # CUDA stops at the first empty entry
], ids=["unset-0", "unset-1", "unset-group", "env-1", "env-2-3-gpus-1", "env-reordered",
        "uuid", "mig", "spaces", "stops-at-empty"])
def test_worker_visible(ordinals, parent, want) -> None:
    assert worker_visible(ordinals, parent, UUIDS) == want


def test_worker_visible_refuses_what_the_parent_cannot_see() -> None:
    with pytest.raises(ConfigError) as err:
        worker_visible((1,), "1", UUIDS)
    assert "CUDA_VISIBLE_DEVICES='1'" in err.value.message
    assert worker_visible((), "1", UUIDS) == ""
    assert worker_visible((2,), None, {}) == "2"  # no NVML UUIDs: the index itself


def test_visible_entries_and_description() -> None:
    assert visible_entries(None) is None
    assert visible_entries("") == []
    assert visible_entries("0,foo,1") == ["0"]
    assert "1→3" in describe_visible("2,3")
    assert "nvidia-smi" in describe_visible(None)


@pytest.mark.parametrize(("parent", "gpus_opt", "want"), [
    ("1", None, ["1"]),
    (None, (1,), ["GPU-bbbb"]),
    ("2,0", (1,), ["0"]),
    (None, None, ["GPU-aaaa", "GPU-bbbb"]),
], ids=["env-1", "flag-gpus-1", "env-and-flag", "all"])
def test_plan_workers_names_the_physical_gpus(parent, gpus_opt, want, tiny_model_dir) -> None:
    count = 1 if parent == "1" else 2
    inventory = [GpuInfo(i, "NVIDIA H200", H200, 140 * GIB, UUIDS[i] if parent is None else "")
                 for i in range(count)]
    plan = plan_workers(ModelConfig(model="test"), ParallelConfig(strategy="replicate",
                                                                  gpus=gpus_opt),
                        inventory=inventory, parent_visible=parent)
    assert [s.visible for s in plan.specs] == want
    assert any("CUDA_VISIBLE_DEVICES=" + want[0] in line for line in plan.lines)


def test_plan_workers_refuses_a_gpu_that_is_not_visible(tiny_model_dir) -> None:
    inventory = [GpuInfo(0, "NVIDIA H200", H200, 140 * GIB, "GPU-aaaa")]
    with pytest.raises(ConfigError) as err:
        plan_workers(ModelConfig(model="test"), ParallelConfig(gpus=(3,)),
                     inventory=inventory, parent_visible="5")
    assert "GPU 3 is not visible" in err.value.message


def test_explicit_device_maps(tiny_model_dir) -> None:
    from chord_core.model.device_map import PLACE, explicit_map

    assert explicit_map(None) == PLACE
    assert explicit_map("Balanced") == "balanced"
    assert explicit_map({"model": 0, "lm_head": 1}) == {"model": 0, "lm_head": 1}
    with pytest.raises(ConfigError):
        explicit_map("everywhere")


def test_place_uses_the_model_size_from_its_config(tiny_model_dir, monkeypatch) -> None:
    """The loader's own path: weights measured on the weightless model, then the planner."""
    import torch
    from transformers import AutoConfig, Qwen2_5_VLForConditionalGeneration

    from chord_core.gpus import devices
    from chord_core.model import device_map

    monkeypatch.setattr(devices, "cuda_inventory", lambda: gpus(140, 140))
    config = AutoConfig.from_pretrained(tiny_model_dir)
    meta = device_map.meta_model(Qwen2_5_VLForConditionalGeneration, config, torch.bfloat16)
    size = sum(p.numel() for p in meta.parameters()) * 2
    placed = device_map.place(ModelConfig(model="test"), meta, None)
    assert placed.device_map == {"": "cuda:0"} and placed.need_bytes == int(size * 1.2)
    shard = device_map.place(ModelConfig(model="test", strategy="shard"), meta, None)
    assert shard.device_map == "auto" and shard.devices == (0, 1)
