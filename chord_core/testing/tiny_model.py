"""Random-weight Qwen2.5-VL checkpoints, built offline, laid out like the official repos.

No machine of this project can download trained weights, so the real loading path
(``from_pretrained`` + ``AutoProcessor``) is exercised on checkpoints made here:

* ``tiny`` — a < 2 MB model (``--model test``): same classes, file names, chat template,
  special tokens and vision geometry (patch 14, merge 2, temporal patch 2, window 112,
  ``tokens_per_second`` 2) as ``Qwen/Qwen2.5-VL-*-Instruct``, with tiny hidden sizes and a
  small byte-level BPE vocabulary. Its output text is meaningless: whatever shows it labels it
  ``TEST_MODEL_LABEL``.
* ``3b`` / ``7b`` — the real shapes with random weights, for GPU tests and benchmarks only
  (build them on ``device="cuda"``; never shipped).

The special tokens keep their names and order but get small ids; ``config.json`` uses the ids
of this tokenizer, so token ids always agree between config, tokenizer and processor.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TEST_MODEL_LABEL = "test model — random weights"
TEST_MODEL_DIRNAME = "tiny-qwen2.5-vl-v1"
SHAPES = ("tiny", "3b", "7b")

# Names and order as in the official tokenizer (ids 151643.. there, small ids here).
SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)
# Added but not special in the official tokenizer.
EXTRA_TOKENS = (
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
)
# Qwen2's pre-tokenizer split pattern (public tokenizer.json).
_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Words whose left-to-right merges make up the tiny vocabulary beyond the 256 byte symbols.
_MERGE_WORDS = (
    " the", " a", " and", " of", " in", " to", " is", " video", " person", " car", " man",
    " woman", " red", " blue", " left", " right", " frame", " bbox", "_2d", " label",
    " json", "```", "[{", "}]", " walking", " scene", " The", " assistant", " helpful",
)

_IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
_IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]

# The chat template of Qwen2.5-VL-Instruct (default system prompt, <|im_start|>/<|im_end|>
# turns, one vision block per image/video part, optional "Picture N:" ids).
CHAT_TEMPLATE = "".join([
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}",
    "{% for message in messages %}",
    "{% if loop.first and message['role'] != 'system' %}",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}",
    "<|im_start|>{{ message['role'] }}\n",
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n",
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
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
])

_VISION_REAL = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                "fullatt_block_indexes": [7, 15, 23, 31]}
_SHAPE_SPECS: dict[str, dict[str, Any]] = {
    "tiny": {"vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                        "fullatt_block_indexes": [1]},
             "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": None,
             "tie_word_embeddings": True, "max_window_layers": 2, "mrope_section": [4, 6, 6],
             # wider than the real 0.02 so greedy output depends on the input (tests can
             # then see position/padding mistakes) instead of repeating one token
             "initializer_range": 0.3},
    "3b": {"vision": _VISION_REAL, "hidden_size": 2048, "intermediate_size": 11008,
           "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
           "vocab_size": 151936, "tie_word_embeddings": True, "max_window_layers": 70,
           "mrope_section": [16, 24, 24]},
    "7b": {"vision": _VISION_REAL, "hidden_size": 3584, "intermediate_size": 18944,
           "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
           "vocab_size": 152064, "tie_word_embeddings": False, "max_window_layers": 28,
           "mrope_section": [16, 24, 24]},
}
_SHARD_BYTES = 4 * 1024**3


# -- tokenizer ------------------------------------------------------------------------------
def _byte_symbols() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for raw bytes (GPT-2 order)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    codes = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    table = dict(zip(printable, codes))
    return [chr(table[b]) for b in range(256)]


def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Byte symbols plus the left-to-right merges of ``_MERGE_WORDS`` (deterministic)."""
    symbols = _byte_symbols()
    vocab = {s: i for i, s in enumerate(symbols)}
    merges: list[tuple[str, str]] = []
    for word in _MERGE_WORDS:
        pieces = [symbols[b] for b in word.encode("utf-8")]
        while len(pieces) > 1:
            pair = (pieces[0], pieces[1])
            joined = pieces[0] + pieces[1]
            if joined not in vocab:
                vocab[joined] = len(vocab)
                merges.append(pair)
            pieces = [joined] + pieces[2:]
    return vocab, merges


def _ranked_vocab(path: str | Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges from a BPE rank file (one ``base64(token) rank`` per line, the
    format Qwen's ``qwen.tiktoken`` ships in). Merging the adjacent pair whose join has the
    lowest rank is byte-level BPE with every in-vocabulary split of a token as a merge,
    ordered by the token's rank: so the token counts are the real tokenizer's."""
    import base64

    ranks: dict[bytes, int] = {}
    for line in Path(path).read_text(encoding="ascii").splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        from chord_core.errors import ConfigError

        raise ConfigError(f"{path} is not a BPE rank file (ranks are not 0..n-1)",
                          hint="pass Qwen's qwen.tiktoken or a file in its format")
    symbols = _byte_symbols()

    def text(token: bytes) -> str:
        return "".join(symbols[b] for b in token)

    merges: list[tuple[str, str]] = []
    for token, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        splits = [(ranks[token[:i]], ranks[token[i:]], token[:i], token[i:])
                  for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges += [(text(a), text(b)) for _, _, a, b in sorted(splits)]
    return {text(t): r for t, r in ranks.items()}, merges


def _build_tokenizer(extra: tuple[str, ...] = (), vocab_file: str | Path | None = None
                     ) -> tuple[Any, dict[str, int], list[tuple[str, str]]]:
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
    )

    vocab, merges = _ranked_vocab(vocab_file) if vocab_file else _vocab_and_merges()
    tok = Tokenizer(models.BPE(vocab=dict(vocab), merges=list(merges), unk_token=None,
                               fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in EXTRA_TOKENS + extra])
    return tok, vocab, merges


def _tokenizer_config(ids: dict[str, int], extra: tuple[str, ...] = (),
                      chat_template: str = CHAT_TEMPLATE) -> dict[str, Any]:
    decoder = {str(ids[t]): {"content": t, "lstrip": False, "normalized": False,
                             "rstrip": False, "single_word": False,
                             "special": t in SPECIAL_TOKENS}
               for t in SPECIAL_TOKENS + EXTRA_TOKENS + extra}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": list(SPECIAL_TOKENS[1:]),
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def _write_tokenizer(out: Path, extra: tuple[str, ...] = (),
                     chat_template: str = CHAT_TEMPLATE, vocab_file: str | Path | None = None
                     ) -> dict[str, int]:
    """tokenizer.json, tokenizer_config.json, vocab.json, merges.txt; returns special ids.
    ``extra``: added (non-special) tokens a later family appends (Qwen3's ``<think>``…);
    ``vocab_file``: a BPE rank file to take the vocabulary from (``_ranked_vocab``)."""
    tok, vocab, merges = _build_tokenizer(extra, vocab_file)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS + EXTRA_TOKENS + extra}
    ids["__len__"] = tok.get_vocab_size(with_added_tokens=True)
    _write_json(out / "tokenizer_config.json", _tokenizer_config(ids, extra, chat_template))
    _write_json(out / "vocab.json", vocab, indent=None)
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (out / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ids


# -- configs --------------------------------------------------------------------------------
def _model_config(shape: str, ids: dict[str, int]) -> dict[str, Any]:
    """Flat ``config.json`` as in the official repos (text keys at top level)."""
    spec = _SHAPE_SPECS[shape]
    vocab_size = spec["vocab_size"] or -(-ids["__len__"] // 64) * 64
    vision = {**spec["vision"], "hidden_act": "silu", "in_chans": 3,
              "out_hidden_size": spec["hidden_size"], "patch_size": 14,
              "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
              "tokens_per_second": 2, "temporal_patch_size": 2}
    return {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "attention_dropout": 0.0,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "hidden_act": "silu",
        "hidden_size": spec["hidden_size"],
        "initializer_range": spec.get("initializer_range", 0.02),
        "intermediate_size": spec["intermediate_size"],
        "max_position_embeddings": 128000,
        "max_window_layers": spec["max_window_layers"],
        "model_type": "qwen2_5_vl",
        "num_attention_heads": spec["num_attention_heads"],
        "num_hidden_layers": spec["num_hidden_layers"],
        "num_key_value_heads": spec["num_key_value_heads"],
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": spec["tie_word_embeddings"],
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": vision,
        "rope_scaling": {"type": "mrope", "mrope_section": list(spec["mrope_section"])},
        "vocab_size": vocab_size,
    }


def _generation_config(ids: dict[str, int]) -> dict[str, Any]:
    return {"bos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"],
            "do_sample": True, "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1}


def _processor_configs() -> dict[str, dict[str, Any]]:
    """Image processor config as in the official repos; video processor config as
    transformers 5.x saves it (it falls back to the image config when this one is absent)."""
    image = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14,
             "temporal_patch_size": 2, "merge_size": 2, "image_mean": _IMAGE_MEAN,
             "image_std": _IMAGE_STD, "image_processor_type": "Qwen2VLImageProcessor",
             "processor_class": "Qwen2_5_VLProcessor"}
    video = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True,
             "do_resize": True, "do_sample_frames": False, "image_mean": _IMAGE_MEAN,
             "image_std": _IMAGE_STD, "max_frames": 768, "merge_size": 2, "min_frames": 4,
             "patch_size": 14, "resample": 3, "rescale_factor": 1 / 255,
             "size": {"longest_edge": 768 * 28 * 28, "shortest_edge": 128 * 28 * 28},
             "temporal_patch_size": 2, "video_processor_type": "Qwen2VLVideoProcessor",
             "processor_class": "Qwen2_5_VLProcessor"}
    return {"preprocessor_config.json": image, "video_preprocessor_config.json": video}


def _readme(shape: str) -> str:
    from chord_core.config import RANDOM_WEIGHTS_TAG

    return (f"---\nlicense: apache-2.0\ntags:\n- {RANDOM_WEIGHTS_TAG}\n---\n"
            f"# Qwen2.5-VL-shaped checkpoint ({shape}) — {TEST_MODEL_LABEL}\n\n"
            "Built offline by `python -m chord_core make-tiny-model`. Same files, classes, chat "
            "template and special tokens as Qwen/Qwen2.5-VL-*-Instruct, but random weights: "
            "its output text is meaningless. For tests and benchmarks only.\n")


def _write_json(path: Path, data: Any, indent: int | None = 2) -> None:
    text = json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=indent is not None)
    path.write_text(text + "\n", encoding="utf-8")


# -- weights --------------------------------------------------------------------------------
def _legacy_name(name: str) -> str:
    """transformers 5.x module names → the key names stored in the official checkpoints."""
    if name.startswith("model.language_model."):
        return "model." + name[len("model.language_model."):]
    if name.startswith("model.visual."):
        return "visual." + name[len("model.visual."):]
    return name


def _random_state_dict(config_dict: dict[str, Any], *, seed: int, device: str,
                       dtype: Any) -> dict[str, Any]:
    """Instantiate the model with random weights and return CPU tensors under official keys."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(**config_dict)
    torch.manual_seed(seed)
    if device.startswith("cuda"):
        torch.cuda.manual_seed_all(seed)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config)
    model = model.to(dtype)
    tensors: dict[str, Any] = {}
    for name, tensor in model.state_dict().items():
        if config_dict["tie_word_embeddings"] and name == "lm_head.weight":
            continue
        tensors[_legacy_name(name)] = tensor.detach().to("cpu").contiguous()
    return tensors


def _decodable_head(tensors: dict[str, Any], n_tokens: int) -> None:
    """Zero the output rows of ids the small tokenizer cannot decode. At the real 3B/7B vocab
    sizes (~152k) a random head would otherwise pick undecodable ids nearly every step and
    every output would decode to ""; with those logits at 0 the argmax lands on a real token,
    so outputs can be compared as text. Input ids never reach the zeroed rows."""
    for key in ("lm_head.weight", "model.embed_tokens.weight"):
        weight = tensors.get(key)
        if weight is not None and weight.shape[0] > n_tokens:
            weight[n_tokens:] = 0
            if key == "lm_head.weight":
                return


def _save_weights(out: Path, tensors: dict[str, Any]) -> None:
    """One ``model.safetensors``, or shards + index above ``_SHARD_BYTES`` (like the hub)."""
    from safetensors.torch import save_file

    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and size + nbytes > _SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    _write_json(out / "model.safetensors.index.json",
                {"metadata": {"total_size": total}, "weight_map": weight_map})


# -- public API -----------------------------------------------------------------------------
def build_checkpoint(out_dir: str | Path, *, shape: str = "tiny", seed: int = 0,
                     device: str = "cpu", dtype: Any = None,
                     vocab_file: str | Path | None = None) -> Path:
    """Write a random-weight Qwen2.5-VL checkpoint (official file layout) into ``out_dir``.

    ``shape`` is ``tiny`` (< 2 MB, CPU tests) or ``3b``/``7b`` (real shapes; build them with
    ``device="cuda"``). The same ``seed`` gives byte-identical weights on the same device.
    ``vocab_file``: the real vocabulary from a BPE rank file (Qwen's ``qwen.tiktoken``), so
    benchmarks see real prompt lengths; by default a small byte-level one.
    """
    import torch

    if shape not in SHAPES:
        from chord_core.errors import ConfigError

        raise ConfigError(f"unknown checkpoint shape {shape!r}",
                          hint=f"use one of: {', '.join(SHAPES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = _write_tokenizer(out, vocab_file=vocab_file)
    config_dict = _model_config(shape, ids)
    _write_json(out / "config.json", config_dict)
    _write_json(out / "generation_config.json", _generation_config(ids))
    _write_json(out / "chat_template.json", {"chat_template": CHAT_TEMPLATE})
    (out / "README.md").write_text(_readme(shape), encoding="utf-8")
    for name, data in _processor_configs().items():
        _write_json(out / name, data)
    dtype = dtype if dtype is not None else torch.bfloat16
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    tensors = _random_state_dict(config_dict, seed=seed, device=device, dtype=dtype)
    _decodable_head(tensors, ids["__len__"])
    _save_weights(out, tensors)
    log.info("wrote random-weight %s checkpoint (%d tensors) to %s", shape, len(tensors), out)
    return out
