"""GPU planner on made-up inventories."""

from __future__ import annotations

import pytest

from chord_core.config import normalise_strategy
from chord_core.errors import ConfigError, ResourceError
from chord_core.gpus.devices import GpuInfo
from chord_core.model.planner import GIB, model_params, params_from_config, plan_gpus

SHAPES = {
    "3b": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
           "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
           "tie_word_embeddings": True,
           "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                             "out_hidden_size": 2048}},
    "7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
           "tie_word_embeddings": False,
           "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420,
                             "out_hidden_size": 3584}},
}


@pytest.mark.parametrize(("shape", "official"), [("3b", 3.75e9), ("7b", 8.29e9)], ids=["3b", "7b"])
def test_param_count_matches_official_sizes(shape, official):
    assert params_from_config(SHAPES[shape]) == pytest.approx(official, rel=0.02)


def gpus(n: int, gib: float, name: str = "GPU") -> list[GpuInfo]:
    return [GpuInfo(i, name, int(gib * GIB), int(gib * GIB)) for i in range(n)]


B7 = int(8.29e9 * 2)
B72 = int(73.4e9 * 2)
B3 = int(3.75e9 * 2)


@pytest.mark.parametrize(
    ("model_bytes", "inventory", "strategy", "groups"),
    [
        (B7, gpus(2, 141, "H200"), "auto", ((0,), (1,))),
        (B7, gpus(1, 24, "RTX 4090"), "auto", ((0,),)),
        (B72, gpus(8, 80, "A100-80GB"), "auto", ((0, 1, 2, 3), (4, 5, 6, 7))),
        (B72, gpus(2, 141, "H200"), "auto", ((0, 1),)),
        (B3, gpus(8, 80), "replicate", tuple((i,) for i in range(8))),
        (B7, gpus(2, 141), "shard", ((0, 1),)),
        (B7, gpus(4, 24), "auto", ((0,), (1,), (2,), (3,))),
    ],
    ids=["7b-2xh200", "7b-1x24g", "72b-8x80g", "72b-2xh200", "3b-replicate-8",
         "7b-shard-2", "7b-4x24g"])
def test_plans(model_bytes, inventory, strategy, groups):
    plan = plan_gpus(model_bytes, inventory, strategy=strategy)
    assert plan.groups == groups
    assert plan.replicas == len(groups)
    for grp in plan.groups:
        assert sum(plan.per_gpu_budget_bytes[i] for i in grp) >= plan.need_bytes


def test_72b_on_one_24g_card_does_not_fit_and_says_what_would():
    with pytest.raises(ResourceError) as err:
        plan_gpus(B72, gpus(1, 24, "RTX 4090"))
    assert "does not fit" in err.value.message and "GiB" in err.value.message
    assert "GPU(s) like RTX 4090" in err.value.hint and "qwen2.5-vl-7b" in err.value.hint


def test_heterogeneous_replicate_skips_small_card():
    inv = [GpuInfo(0, "H200", 141 * GIB, 141 * GIB), GpuInfo(1, "T4", 16 * GIB, 16 * GIB)]
    plan = plan_gpus(B7, inv, strategy="replicate")
    assert plan.groups == ((0,),) and plan.unused == (1,)


def test_free_memory_not_total_is_used():
    busy = [GpuInfo(0, "H200", 141 * GIB, 10 * GIB)]
    with pytest.raises(ResourceError):
        plan_gpus(B7, busy)


@pytest.mark.parametrize(("name", "expected"),
                         [("data_parallel", "replicate"), ("AUTO", "auto"), ("shard", "shard"),
                          ("model_parallel", "shard")], ids=["dp", "case", "shard", "mp"])
def test_strategy_names(name, expected):
    assert normalise_strategy(name) == expected


def test_bad_strategy_and_fraction():
    with pytest.raises(ConfigError):
        normalise_strategy("magic")
    with pytest.raises(ConfigError):
        plan_gpus(B7, gpus(1, 80), max_memory_fraction=1.5)


def test_known_model_names_and_unknown():
    assert model_params("Qwen/Qwen2.5-VL-72B-Instruct") == int(73.4e9)
    with pytest.raises(ConfigError):
        model_params("someone/unknown-model")
