"""The tiny random-weight Qwen3-VL checkpoint and the Qwen3-VL model path: official file set
and classes, token ids that agree, loading through ``--model test-qwen3``, frame timestamps in
the prompt from the frames' own times, 32-px token geometry, 0–1000 boxes, and parameter
counts the planner gets right (dense, deepstack, MoE)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from chord_core.config import ModelConfig
from chord_core.errors import ConfigError
from chord_core.model import fastgen, fastvision
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m
from chord_core.model.planner import KNOWN_PARAMS, model_params, params_from_config
from chord_core.testing import tiny_qwen3 as tq

OFFICIAL_FILES = {
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
    "tokenizer_config.json", "vocab.json", "merges.txt", "chat_template.json",
    "preprocessor_config.json", "video_preprocessor_config.json", "README.md",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tq.build_checkpoint(tmp_path_factory.mktemp("q3") / "a", seed=0)


@pytest.fixture(scope="module")
def lm() -> m.LoadedModel:
    return m.load_model(ModelConfig(model="test-qwen3", device="cpu"))


def _meta_params(cls_name: str, config_dict: dict) -> int:
    import transformers

    cls = getattr(transformers, cls_name)
    config = cls.config_class(**json.loads(json.dumps(config_dict)))
    with torch.device("meta"):
        model = cls._from_config(config)
    return sum(p.numel() for p in model.parameters())


def _moe(config_dict: dict) -> dict:
    d = json.loads(json.dumps(config_dict))
    d.update(model_type="qwen3_vl_moe", architectures=["Qwen3VLMoeForConditionalGeneration"])
    d["text_config"].update(model_type="qwen3_vl_moe_text", num_experts=4, num_experts_per_tok=2,
                            moe_intermediate_size=48, decoder_sparse_step=1,
                            mlp_only_layers=[1])  # layer 1 dense, layer 0 routed
    d["vision_config"]["model_type"] = "qwen3_vl_moe"
    return d


# -- the checkpoint -------------------------------------------------------------------------
def test_writes_the_official_file_set_small(built: Path) -> None:
    assert {p.name for p in built.iterdir()} == OFFICIAL_FILES
    assert sum(p.stat().st_size for p in built.iterdir()) < 2 * 1024 * 1024


def test_same_seed_gives_identical_bytes(built: Path, tmp_path: Path) -> None:
    again = tq.build_checkpoint(tmp_path / "b", seed=0)
    for name in OFFICIAL_FILES:
        assert (again / name).read_bytes() == (built / name).read_bytes(), name


def test_config_is_nested_like_the_official_repos(built: Path) -> None:
    cfg = json.loads((built / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_vl"
    assert cfg["architectures"] == ["Qwen3VLForConditionalGeneration"]
    assert cfg["text_config"]["model_type"] == "qwen3_vl_text"
    assert cfg["text_config"]["rope_scaling"]["mrope_interleaved"] is True
    assert sum(cfg["text_config"]["rope_scaling"]["mrope_section"]) * 2 == \
        cfg["text_config"]["head_dim"]
    vision = cfg["vision_config"]
    assert (vision["patch_size"], vision["spatial_merge_size"], vision["temporal_patch_size"]) \
        == (16, 2, 2)
    assert vision["deepstack_visual_indexes"] and vision["out_hidden_size"] == \
        cfg["text_config"]["hidden_size"]


def test_token_ids_agree_between_config_tokenizer_and_processor(built: Path) -> None:
    from transformers import AutoConfig, AutoProcessor

    cfg = AutoConfig.from_pretrained(built)
    proc = AutoProcessor.from_pretrained(built)
    tok = proc.tokenizer
    assert type(proc).__name__ == "Qwen3VLProcessor"
    assert type(proc.video_processor).__name__ == "Qwen3VLVideoProcessor"
    for name, token in (("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                        ("vision_start_token_id", "<|vision_start|>"),
                        ("vision_end_token_id", "<|vision_end|>")):
        assert getattr(cfg, name) == tok.convert_tokens_to_ids(token), name
    assert tok.convert_tokens_to_ids("<think>") not in (None, tok.unk_token_id)
    text = proc.apply_chat_template([{"role": "user", "content": [{"type": "text",
                                                                   "text": "hi"}]}],
                                    tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # no system turn


@pytest.mark.parametrize("shape, params", [("2b", 2.13e9), ("4b", 4.44e9), ("8b", 8.77e9)])
def test_real_shapes_have_the_official_parameter_counts(shape: str, params: float) -> None:
    ids = {t: i for i, t in enumerate(("<|endoftext|>", "<|im_end|>", "<|image_pad|>",
                                       "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"))}
    config = tq._model_config(shape, {**ids, "__len__": 300})
    counted = _meta_params("Qwen3VLForConditionalGeneration", config)
    assert params_from_config(config) == counted
    assert abs(counted - params) / params < 0.005


def test_unknown_shape_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shape"):
        tq.build_checkpoint(tmp_path, shape="7b")


# -- the planner ----------------------------------------------------------------------------
def test_planner_counts_tiny_dense_and_moe_exactly(built: Path) -> None:
    config = json.loads((built / "config.json").read_text())
    assert params_from_config(config) == \
        _meta_params("Qwen3VLForConditionalGeneration", config)
    moe = _moe(config)
    assert params_from_config(moe) == _meta_params("Qwen3VLMoeForConditionalGeneration", moe)
    assert params_from_config(moe) > params_from_config(config)  # every expert counted


@pytest.mark.parametrize("repo, key", [
    ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-vl-8b"),
    ("Qwen/Qwen3-VL-2B-Instruct", "qwen3-vl-2b"),
    ("Qwen/Qwen3-VL-30B-A3B-Instruct", "qwen3-vl-30b-a3b"),
    ("Qwen/Qwen3-VL-235B-A22B-Instruct", "qwen3-vl-235b-a22b"),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl-7b"),
], ids=["8b", "2b", "30b-a3b", "235b", "qwen2.5-7b"])
def test_hub_ids_size_from_the_known_table(repo: str, key: str) -> None:
    assert model_params(repo) == int(KNOWN_PARAMS[key])


# -- loading and inputs ---------------------------------------------------------------------
def test_test_qwen3_loads_as_qwen3_with_relative_coordinates(lm: m.LoadedModel) -> None:
    assert (lm.family, lm.coord_mode) == ("qwen3-vl", "relative1000")
    assert lm.info.to_dict()["coords"] == "relative1000" and lm.info.test_model
    assert isinstance(lm.decoder, fastgen.FastDecoder)
    # Qwen3-VL's tower runs fastvision's attention too (installed at load; again: re-enabled)
    blocks = fastvision.vision_tower(lm.model).blocks
    assert all(hasattr(b.attn, "_chord_original") for b in blocks)
    assert fastvision.install(lm.model) == len(blocks)
    assert fastgen.unsupported_reason(lm.model) is None


def test_moe_family_maps_to_qwen3_and_decodes_through_generate(built: Path) -> None:
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    assert m._model_class("qwen3_vl_moe")[:2] == ("qwen3-vl", "relative1000")
    moe = Qwen3VLMoeForConditionalGeneration(
        Qwen3VLMoeConfig(**_moe(json.loads((built / "config.json").read_text()))))
    assert "mixture of experts" in fastgen.unsupported_reason(moe)  # layer 0 routed
    first, second = moe.model.language_model.layers[:2]
    first.mlp, second.mlp = second.mlp, first.mlp
    assert "mixture of experts" in fastgen.unsupported_reason(moe)  # a later layer routed


def _prompt_times(lm: m.LoadedModel, meta: dict, n: int = 4) -> list[float]:
    frames = np.random.default_rng(0).integers(0, 255, (n, 64, 96, 3), dtype=np.uint8)
    inputs = model_inputs.build_video_inputs(lm, frames, meta, "Describe.")
    text = lm.processor.tokenizer.decode(inputs["input_ids"][0])
    return [float(t) for t in re.findall(r"<([\d.]+) seconds>", text)]


@pytest.mark.parametrize("times, want", [
    (None, [0.2, 1.0]),                      # no frame times: index / fps (avg of each pair)
    ([0.0, 0.4, 0.8, 1.2], [0.2, 1.0]),     # regular: the same
    ([0.0, 0.1, 5.0, 5.1], [0.1, 5.0]),     # a jump: the container's times, not index / fps
], ids=["no-times", "regular", "jump"])
def test_prompt_timestamps_follow_the_frames_own_times(lm: m.LoadedModel, times: list | None,
                                                       want: list[float]) -> None:
    meta = {"total_num_frames": 40, "fps": 10.0, "frames_indices": [0, 4, 8, 12]}
    if times is not None:
        meta["timestamps_s"] = times
    assert _prompt_times(lm, meta) == pytest.approx(want, abs=0.051)


def test_frames_keep_their_size_on_the_32_px_grid(lm: m.LoadedModel, caplog) -> None:
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
              for h, w in ((56, 84), (252, 448), (64, 64))]
    inputs = model_inputs.build_image_inputs(lm, images, "the red car")
    got = [(int(g[2]) * 16, int(g[1]) * 16) for g in inputs["image_grid_thw"].tolist()]
    assert got == [(96, 64), (448, 256), (64, 64)]  # rounded to 32 px, never shrunk further
    frames = rng.integers(0, 255, (6, 252, 448, 3), dtype=np.uint8)
    meta = {"total_num_frames": 6, "fps": 2.0, "frames_indices": list(range(6))}
    grid = model_inputs.build_video_inputs(lm, frames, meta, "x")["video_grid_thw"].tolist()[0]
    assert grid == [3, 16, 28] and "resized" not in caplog.text


def test_ground_prompt_asks_for_0_to_1000(lm: m.LoadedModel) -> None:
    inputs = model_inputs.build_image_inputs(lm, [np.zeros((64, 64, 3), np.uint8)], "the dog")
    assert "0-1000" in lm.processor.tokenizer.decode(inputs["input_ids"][0])
