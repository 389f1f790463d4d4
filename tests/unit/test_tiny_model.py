"""The tiny random-weight checkpoint: official file set, size, determinism, and that the
transformers Auto* classes load it with token ids that agree everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chord_core.errors import ConfigError
from chord_core.testing import checkpoints
from chord_core.testing import tiny_model as tm

OFFICIAL_FILES = {
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
    "tokenizer_config.json", "vocab.json", "merges.txt", "chat_template.json",
    "preprocessor_config.json", "video_preprocessor_config.json", "README.md",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tm.build_checkpoint(tmp_path_factory.mktemp("tiny") / "a", seed=0)


@pytest.fixture(scope="module")
def config_json(built: Path) -> dict:
    return json.loads((built / "config.json").read_text())


def test_writes_the_official_file_set(built: Path) -> None:
    assert {p.name for p in built.iterdir()} == OFFICIAL_FILES


def test_is_smaller_than_two_megabytes(built: Path) -> None:
    total = sum(p.stat().st_size for p in built.iterdir())
    assert 0 < total < 2 * 1024 * 1024


def test_same_seed_gives_identical_bytes(built: Path, tmp_path: Path) -> None:
    again = tm.build_checkpoint(tmp_path / "b", seed=0)
    for name in OFFICIAL_FILES:
        assert (again / name).read_bytes() == (built / name).read_bytes(), name


def test_other_seed_gives_other_weights(built: Path, tmp_path: Path) -> None:
    other = tm.build_checkpoint(tmp_path / "c", seed=1)
    assert (other / "model.safetensors").read_bytes() != (built / "model.safetensors").read_bytes()
    assert (other / "config.json").read_bytes() == (built / "config.json").read_bytes()


@pytest.mark.parametrize("key, value", [
    ("architectures", ["Qwen2_5_VLForConditionalGeneration"]),
    ("model_type", "qwen2_5_vl"),
    ("torch_dtype", "bfloat16"),
], ids=["architectures", "model_type", "dtype"])
def test_config_json_matches_official_keys(config_json: dict, key: str, value: object) -> None:
    assert config_json[key] == value


@pytest.mark.parametrize("key, value", [
    ("patch_size", 14), ("spatial_merge_size", 2), ("temporal_patch_size", 2),
    ("window_size", 112), ("tokens_per_second", 2),
], ids=["patch", "merge", "temporal", "window", "tokens_per_second"])
def test_vision_geometry_is_real(config_json: dict, key: str, value: int) -> None:
    assert config_json["vision_config"][key] == value


def test_auto_config_loads_with_consistent_shapes(built: Path) -> None:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(built)
    text = cfg.text_config
    head_dim = text.hidden_size // text.num_attention_heads
    assert type(cfg).__name__ == "Qwen2_5_VLConfig"
    assert sum(text.rope_parameters["mrope_section"]) * 2 == head_dim
    assert all(0 <= i < cfg.vision_config.depth for i in cfg.vision_config.fullatt_block_indexes)
    assert cfg.vision_config.out_hidden_size == text.hidden_size


def test_auto_processor_loads_official_classes(built: Path) -> None:
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(built)
    assert type(proc).__name__ == "Qwen2_5_VLProcessor"
    assert type(proc.image_processor).__name__.startswith("Qwen2VLImageProcessor")
    assert type(proc.video_processor).__name__ == "Qwen2VLVideoProcessor"
    assert type(proc.tokenizer).__name__.startswith("Qwen2Tokenizer")


@pytest.mark.parametrize("token, config_key", [
    ("<|image_pad|>", "image_token_id"),
    ("<|video_pad|>", "video_token_id"),
    ("<|vision_start|>", "vision_start_token_id"),
    ("<|vision_end|>", "vision_end_token_id"),
    ("<|im_end|>", "eos_token_id"),
    ("<|endoftext|>", "bos_token_id"),
], ids=["image", "video", "vision_start", "vision_end", "eos", "bos"])
def test_special_token_ids_match_config(built: Path, config_json: dict, token: str,
                                        config_key: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    token_id = tok.convert_tokens_to_ids(token)
    assert token_id == config_json[config_key]
    assert tok.convert_ids_to_tokens(token_id) == token
    assert token_id < config_json["vocab_size"]


def test_every_qwen_special_token_is_one_special_token(built: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    for token in tm.SPECIAL_TOKENS:
        ids = tok(token, add_special_tokens=False)["input_ids"]
        assert ids == [tok.convert_tokens_to_ids(token)]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


@pytest.mark.parametrize("text", ["hello world", " the person walking", "Ünïcode → ✓ 日本",
                                  '[{"bbox_2d": [1, 2, 3, 4], "label": "car"}]'],
                         ids=["ascii", "merged-words", "unicode", "json"])
def test_tokenizer_round_trips_text(built: Path, text: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    assert tok.decode(tok(text)["input_ids"]) == text


@pytest.mark.parametrize("messages, expected", [
    ([{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Hi"}]}],
     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
     "<|vision_start|><|video_pad|><|vision_end|>Hi<|im_end|>\n<|im_start|>assistant\n"),
    ([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Box?"}]}],
     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
     "<|vision_start|><|image_pad|><|vision_end|>Box?<|im_end|>\n<|im_start|>assistant\n"),
], ids=["default-system-video", "own-system-image"])
def test_chat_template_renders_qwen_format(built: Path, messages: list, expected: str) -> None:
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(built)
    text = proc.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == expected


def test_model_weights_load_without_missing_keys(built: Path) -> None:
    from transformers import Qwen2_5_VLForConditionalGeneration

    _, info = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        built, dtype="float32", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.parametrize("shape, hidden, layers, heads, kv, vocab, tied", [
    ("3b", 2048, 36, 16, 2, 151936, True),
    ("7b", 3584, 28, 28, 4, 152064, False),
], ids=["3b", "7b"])
def test_real_shape_configs(shape: str, hidden: int, layers: int, heads: int, kv: int,
                            vocab: int, tied: bool) -> None:
    from transformers import Qwen2_5_VLConfig

    ids = {t: i for i, t in enumerate(tm.SPECIAL_TOKENS)}
    cfg = Qwen2_5_VLConfig(**tm._model_config(shape, ids))
    text, vision = cfg.text_config, cfg.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads,
            text.num_key_value_heads, text.vocab_size, cfg.tie_word_embeddings) == (
        hidden, layers, heads, kv, vocab, tied)
    assert (vision.depth, vision.hidden_size, vision.num_heads, vision.intermediate_size) == (
        32, 1280, 16, 3420)
    assert list(vision.fullatt_block_indexes) == [7, 15, 23, 31]
    assert text.rope_parameters["mrope_section"] == [16, 24, 24]


def test_unknown_shape_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown checkpoint shape"):
        tm.build_checkpoint(tmp_path, shape="72b")


def test_ensure_test_model_builds_once(tmp_path: Path) -> None:
    first = checkpoints.ensure_test_model(tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = checkpoints.ensure_test_model(tmp_path)
    assert again == first == tmp_path / "models" / tm.TEST_MODEL_DIRNAME
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]


def test_ensure_test_model_rebuilds_an_incomplete_folder(tmp_path: Path) -> None:
    broken = tmp_path / "models" / tm.TEST_MODEL_DIRNAME
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{}")
    path = checkpoints.ensure_test_model(tmp_path)
    assert (path / "model.safetensors").is_file()
    assert json.loads((path / "config.json").read_text())["model_type"] == "qwen2_5_vl"


def test_readme_labels_random_weights(built: Path) -> None:
    from chord_core.model.hub import is_random_weights

    assert tm.TEST_MODEL_LABEL == "test model — random weights"
    assert tm.TEST_MODEL_LABEL in (built / "README.md").read_text()
    assert is_random_weights(built)


def _reference_bpe(word: bytes, ranks: dict[bytes, int]) -> list[bytes]:
    """Rank-file BPE as its format defines it: join the adjacent pair whose join ranks lowest."""
    parts = [word[i:i + 1] for i in range(len(word))]
    while True:
        joins = [(ranks[a + b], i) for i, (a, b) in enumerate(zip(parts, parts[1:]))
                 if a + b in ranks]
        if not joins:
            return parts
        _, i = min(joins)
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def test_a_rank_file_vocabulary_tokenizes_as_its_ranks_say(tmp_path: Path) -> None:
    """``--vocab`` (Qwen's qwen.tiktoken in benchmarks): the checkpoint's tokenizer splits
    text exactly as greedy lowest-rank merging over the file's ranks does, and the special
    tokens come right after the vocabulary (where the official ids are)."""
    import base64

    from tokenizers import Tokenizer

    ranks = {bytes([b]): b for b in range(256)}
    for token in (b"he", b"ll", b"hell", b"hello", b" w", b"or", b" wor", b" world",
                  b"el", b"lo", b"llo", b" the", b"th", b" t", b"the"):
        ranks.setdefault(token, len(ranks))
    rank_file = tmp_path / "ranks.tiktoken"
    rank_file.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n"
                                 for t, r in ranks.items()), encoding="ascii")
    out = tm.build_checkpoint(tmp_path / "ck", shape="tiny", vocab_file=rank_file)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    for word in ("hello", "hell", "shell", "llo", "othello", "hellohello", "helo", "ollhe"):
        got = [tok.id_to_token(i) for i in tok.encode(word, add_special_tokens=False).ids]
        want = _reference_bpe(word.encode(), ranks)
        assert [tok.token_to_id(t) for t in got] == [ranks[p] for p in want], (word, got)
    sentence = " hello world the other"
    ids = tok.encode(sentence, add_special_tokens=False).ids
    assert tok.decode(ids) == sentence
    assert tok.token_to_id("<|endoftext|>") == len(ranks)
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("aGk= 5\n", encoding="ascii")
    with pytest.raises(ConfigError, match="not a BPE rank file"):
        tm.build_checkpoint(tmp_path / "ck2", shape="tiny", vocab_file=bad)
