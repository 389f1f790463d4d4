"""Random-weight Qwen3-VL checkpoints, built offline, laid out like the official repos.

The sibling of ``tiny_model`` (Qwen2.5-VL) for ``Qwen/Qwen3-VL-*-Instruct``: the same file set
(nested ``config.json`` with ``model_type: qwen3_vl`` and ``text_config``/``vision_config``,
``generation_config.json``, ``chat_template.json``, image and video processor configs, a
byte-level BPE tokenizer with the official special tokens in their official order), the
same classes (``Qwen3VLForConditionalGeneration``, ``Qwen3VLProcessor``,
``Qwen3VLVideoProcessor``) and the same state-dict keys (``model.language_model.*``,
``model.visual.*``, ``lm_head.weight``).

* ``tiny`` — well under 2 MB (``--model test-qwen3``): Qwen3-VL's geometry (patch 16, merge 2,
  temporal patch 2, deepstack mergers, per-head q/k RMS norms, interleaved mrope) with tiny
  widths. Output text is meaningless (``TEST_MODEL_LABEL``).
* ``2b`` / ``4b`` / ``8b`` — the real shapes, random weights, for GPU benchmarks only.
* ``thinking=True`` (``--model test-qwen3-thinking``): the same weights with the
  ``Qwen3-VL-*-Thinking`` chat template, whose generation prompt opens the reasoning block
  (``<|im_start|>assistant\n<think>\n``), so a Thinking model's whole path runs on CPU.

Where the real shapes come from: ``Qwen/Qwen3-VL-4B-Instruct``'s config.json as quoted in
public code (text 2560/9728/36 layers/32 heads/8 KV heads/head_dim 128, tied; vision depth
24, width 1024, deepstack [5, 11, 17]); 8B's text 4096/36 layers/32 heads/8 KV and vision
depth 27, width 1152, intermediate 4304, deepstack [8, 16, 24] from the same sources, with
its MLP width 12288 (Qwen3-8B's; it reproduces the published 8.77 B parameters, untied);
2B: text 2048/28 layers/16 heads/8 KV (Qwen3-1.7B's, MLP 6144, tied) with 4B's vision
tower. All use rope_theta 5e6 and mrope_section [24, 20, 20] (interleaved).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from chord_core.testing import tiny_model as base

log = logging.getLogger(__name__)

TEST_MODEL_LABEL = base.TEST_MODEL_LABEL
TEST_MODEL_DIRNAME = "tiny-qwen3-vl-v1"
THINKING_DIRNAME = "tiny-qwen3-vl-thinking-v1"
SHAPES = ("tiny", "2b", "4b", "8b")
# Added after <|file_sep|> in the Qwen3 tokenizer (not special).
QWEN3_EXTRA_TOKENS = ("<tool_response>", "</tool_response>", "<think>", "</think>")

# The Qwen3-VL-Instruct chat template, for what Chord sends (user turns with image / video
# parts and text; no tools): unlike Qwen2.5-VL there is no default system prompt.
CHAT_TEMPLATE = "".join([
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}",
    "{% for message in messages %}",
    "<|im_start|>{{ message['role'] }}\n",
    "{% if message['content'] is string %}{{ message['content'] }}",
    "{% else %}{% for part in message['content'] %}",
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}",
    "{% set image_count.value = image_count.value + 1 %}",
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}",
    "<|vision_start|><|image_pad|><|vision_end|>",
    "{% elif part['type'] == 'video' or 'video' in part %}",
    "{% set video_count.value = video_count.value + 1 %}",
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}",
    "<|vision_start|><|video_pad|><|vision_end|>",
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}",
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
])

# Qwen3-VL-*-Thinking: the same template, but the generation prompt opens the reasoning block
# (the model writes its reasoning, ``</think>``, then the answer).
THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")

_VISION_8B = {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
              "deepstack_visual_indexes": [8, 16, 24]}
_VISION_4B = {"depth": 24, "hidden_size": 1024, "intermediate_size": 4096, "num_heads": 16,
              "deepstack_visual_indexes": [5, 11, 17]}
_SHAPE_SPECS: dict[str, dict[str, Any]] = {
    "tiny": {"vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 64,
                        "num_heads": 2, "deepstack_visual_indexes": [0, 1]},
             "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
             "vocab_size": None, "tie_word_embeddings": True, "mrope_section": [6, 5, 5],
             "initializer_range": 0.3},  # wide, as in tiny_model: greedy output varies
    "2b": {"vision": _VISION_4B, "hidden_size": 2048, "intermediate_size": 6144,
           "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
           "mrope_section": [24, 20, 20]},
    "4b": {"vision": _VISION_4B, "hidden_size": 2560, "intermediate_size": 9728,
           "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": True,
           "mrope_section": [24, 20, 20]},
    "8b": {"vision": _VISION_8B, "hidden_size": 4096, "intermediate_size": 12288,
           "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
           "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False,
           "mrope_section": [24, 20, 20]},
}
_MEAN_STD = [0.5, 0.5, 0.5]


def _model_config(shape: str, ids: dict[str, int]) -> dict[str, Any]:
    """Nested ``config.json`` as in the official Qwen3-VL repos."""
    spec = _SHAPE_SPECS[shape]
    vocab_size = spec["vocab_size"] or -(-ids["__len__"] // 64) * 64
    init = spec.get("initializer_range", 0.02)
    text = {
        "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "head_dim": spec["head_dim"], "hidden_act": "silu", "hidden_size": spec["hidden_size"],
        "initializer_range": init, "intermediate_size": spec["intermediate_size"],
        "max_position_embeddings": 262144, "model_type": "qwen3_vl_text",
        "num_attention_heads": spec["num_attention_heads"],
        "num_hidden_layers": spec["num_hidden_layers"],
        "num_key_value_heads": spec["num_key_value_heads"], "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": list(spec["mrope_section"]),
                         "rope_type": "default"},
        "rope_theta": 5000000, "tie_word_embeddings": spec["tie_word_embeddings"],
        "dtype": "bfloat16", "use_cache": True, "vocab_size": vocab_size,
    }
    vision = {**spec["vision"], "hidden_act": "gelu_pytorch_tanh", "in_channels": 3,
              "initializer_range": init, "model_type": "qwen3_vl",
              "num_position_embeddings": 2304, "out_hidden_size": spec["hidden_size"],
              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "model_type": "qwen3_vl", "text_config": text, "vision_config": vision,
        "tie_word_embeddings": spec["tie_word_embeddings"], "dtype": "bfloat16",
    }


def _generation_config(ids: dict[str, int]) -> dict[str, Any]:
    return {"bos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"],
            "do_sample": True, "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "top_k": 20, "top_p": 0.8, "temperature": 0.7, "repetition_penalty": 1.0}


def _processor_configs() -> dict[str, dict[str, Any]]:
    """Image and video processor configs as in the official repos (patch 16, mean/std 0.5;
    the video ``size`` bounds are pixel totals over all frames)."""
    common = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
              "image_mean": _MEAN_STD, "image_std": _MEAN_STD,
              "processor_class": "Qwen3VLProcessor"}
    image = {**common, "size": {"longest_edge": 16777216, "shortest_edge": 65536},
             "image_processor_type": "Qwen2VLImageProcessorFast"}
    video = {**common, "size": {"longest_edge": 25165824, "shortest_edge": 4096},
             "do_sample_frames": True, "fps": 2, "min_frames": 4, "max_frames": 768,
             "video_processor_type": "Qwen3VLVideoProcessor"}
    return {"preprocessor_config.json": image, "video_preprocessor_config.json": video}


def _readme(shape: str, thinking: bool = False) -> str:
    from chord_core.config import RANDOM_WEIGHTS_TAG

    kind = "Thinking " if thinking else ""
    return (f"---\nlicense: apache-2.0\ntags:\n- {RANDOM_WEIGHTS_TAG}\n---\n"
            f"# Qwen3-VL-shaped {kind}checkpoint ({shape}) — {TEST_MODEL_LABEL}\n\n"
            "Built offline by `python -m chord_core make-tiny-model --family qwen3-vl`. Same "
            "files, classes, chat template and special tokens as Qwen/Qwen3-VL-*-Instruct, but "
            "random weights: its output text is meaningless. For tests and benchmarks only.\n")


def _random_state_dict(config_dict: dict[str, Any], *, seed: int, device: str,
                       dtype: Any) -> dict[str, Any]:
    """Instantiate the model with random weights; CPU tensors under the official keys."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig(**json.loads(json.dumps(config_dict)))
    torch.manual_seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed_all(seed)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(config)
    model = model.to(dtype)
    tied = config_dict["tie_word_embeddings"]
    return {name: t.detach().to("cpu").contiguous() for name, t in model.state_dict().items()
            if not (tied and name == "lm_head.weight")}


def _decodable_head(tensors: dict[str, Any], n_tokens: int) -> None:
    """As ``tiny_model._decodable_head``: zero the output rows past the small tokenizer's
    vocabulary so real-vocab shapes still produce decodable text."""
    for key in ("lm_head.weight", "model.language_model.embed_tokens.weight"):
        weight = tensors.get(key)
        if weight is not None and weight.shape[0] > n_tokens:
            weight[n_tokens:] = 0
            if key == "lm_head.weight":
                return


def build_checkpoint(out_dir: str | Path, *, shape: str = "tiny", seed: int = 0,
                     device: str = "cpu", dtype: Any = None, thinking: bool = False) -> Path:
    """Write a random-weight Qwen3-VL checkpoint (official file layout) into ``out_dir``.

    ``shape``: ``tiny`` (CPU tests) or ``2b``/``4b``/``8b`` (real shapes; build them with
    ``device="cuda"``). The same ``seed`` gives byte-identical weights on the same device.
    ``thinking``: the Thinking chat template (``THINKING_CHAT_TEMPLATE``).
    """
    import torch

    if shape not in SHAPES:
        from chord_core.errors import ConfigError

        raise ConfigError(f"unknown Qwen3-VL checkpoint shape {shape!r}",
                          hint=f"use one of: {', '.join(SHAPES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    template = THINKING_CHAT_TEMPLATE if thinking else CHAT_TEMPLATE
    ids = base._write_tokenizer(out, QWEN3_EXTRA_TOKENS, template)
    config_dict = _model_config(shape, ids)
    base._write_json(out / "config.json", config_dict)
    base._write_json(out / "generation_config.json", _generation_config(ids))
    base._write_json(out / "chat_template.json", {"chat_template": template})
    (out / "README.md").write_text(_readme(shape, thinking), encoding="utf-8")
    for name, data in _processor_configs().items():
        base._write_json(out / name, data)
    dtype = dtype if dtype is not None else torch.bfloat16
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    tensors = _random_state_dict(config_dict, seed=seed, device=device, dtype=dtype)
    _decodable_head(tensors, ids["__len__"])
    base._save_weights(out, tensors)
    log.info("wrote random-weight Qwen3-VL %s checkpoint (%d tensors) to %s", shape,
             len(tensors), out)
    return out
