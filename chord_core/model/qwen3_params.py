"""Parameter counts of Qwen3-VL checkpoints from their config.json (the planner's sizes).

Qwen3-VL nests its decoder under ``text_config`` and its vision tower under
``vision_config``. Counted as transformers builds the model:

* decoder layer: q/k/v/o projections with an explicit ``head_dim`` (bias only if
  ``attention_bias``), per-head q/k RMS norms, two RMS norms, and either a gated MLP or —
  Qwen3-VL-MoE — a router plus ``num_experts`` gated experts of ``moe_intermediate_size``
  (layers listed in ``mlp_only_layers`` or off the ``decoder_sparse_step`` keep the dense
  MLP). Every expert is counted: the planner assumes all experts are resident in GPU
  memory (transformers loads them all; nothing is offloaded per token);
* vision tower: 3-D patch embedding with bias, a learned position table
  (``num_position_embeddings``), blocks with LayerNorms, biased qkv/proj and a two-layer
  MLP, the patch merger, and one more merger per ``deepstack_visual_indexes`` entry
  (normalised after the 2×2 shuffle, so over ``hidden × merge²``).
"""

from __future__ import annotations

from typing import Any


def _text_params(text: dict[str, Any], tied: bool) -> int:
    h = int(text["hidden_size"])
    heads = int(text["num_attention_heads"])
    kv = int(text.get("num_key_value_heads") or heads)
    hd = int(text.get("head_dim") or h // heads)
    bias = bool(text.get("attention_bias", False))
    attn = 2 * h * heads * hd + 2 * h * kv * hd + 2 * hd
    if bias:
        attn += heads * hd + 2 * kv * hd + h
    dense = 3 * h * int(text.get("intermediate_size") or 0)
    experts = int(text.get("num_experts") or 0)
    step = int(text.get("decoder_sparse_step") or 1)
    dense_only = set(text.get("mlp_only_layers") or ())
    moe = h * experts + experts * 3 * h * int(text.get("moe_intermediate_size") or 0)
    layers = int(text["num_hidden_layers"])
    total = 0
    for i in range(layers):
        sparse = experts > 0 and i not in dense_only and (i + 1) % step == 0
        total += attn + 2 * h + (moe if sparse else dense)
    vocab = int(text["vocab_size"])
    return total + vocab * h * (1 if tied else 2) + h


def _merger(vh: int, merge: int, out: int, norm_dim: int) -> int:
    inner = vh * merge * merge
    return 2 * norm_dim + inner * inner + inner + inner * out + out


def _vision_params(vision: dict[str, Any], out_default: int) -> int:
    vh = int(vision.get("hidden_size", 1152))
    vi = int(vision.get("intermediate_size", 4304))
    depth = int(vision.get("depth", 27))
    patch, tp = int(vision.get("patch_size", 16)), int(vision.get("temporal_patch_size", 2))
    merge = int(vision.get("spatial_merge_size", 2))
    out = int(vision.get("out_hidden_size") or out_default)
    channels = int(vision.get("in_channels", 3))
    total = channels * tp * patch * patch * vh + vh
    total += int(vision.get("num_position_embeddings", 2304)) * vh
    total += depth * (4 * vh + 4 * vh * vh + 4 * vh + 2 * vh * vi + vi + vh)
    total += _merger(vh, merge, out, vh)
    deep = len(vision.get("deepstack_visual_indexes") or ())
    return total + deep * _merger(vh, merge, out, vh * merge * merge)


def qwen3_vl_params(config: dict[str, Any]) -> int:
    """Parameters of a ``qwen3_vl`` / ``qwen3_vl_moe`` config.json (all experts counted)."""
    text = config.get("text_config") or config
    tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    total = _text_params(text, tied)
    if config.get("vision_config"):
        total += _vision_params(config["vision_config"], int(text["hidden_size"]))
    return int(total)
