"""Pure parts of model loading: memory caps, dtype choice, offload refusal, model resolution
errors (fast, offline), availability checks and prompt construction."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from chord_core.config import ModelConfig
from chord_core.errors import ConfigError, ModelNotFoundError, PlacementError
from chord_core.model import hub, prompts
from chord_core.model.placement import check_placement, choose_dtype, parse_max_memory

GiB = 2**30
TWO_GPUS = {0: 80 * GiB, 1: 40 * GiB}


# -- parse_max_memory -----------------------------------------------------------------------
@pytest.mark.parametrize("spec, cpu, expected", [
    (None, None, None),
    ("", None, None),
    (0.9, None, {0: int(80 * GiB * 0.9), 1: int(40 * GiB * 0.9)}),
    ("0.5", None, {0: 40 * GiB, 1: 20 * GiB}),
    ("20GiB", None, {0: 20 * GiB, 1: 20 * GiB}),
    ("20GB", None, {0: 20 * 10**9, 1: 20 * 10**9}),
    ("20 gib", None, {0: 20 * GiB, 1: 20 * GiB}),
    ("0:30GiB,1:10GiB", None, {0: 30 * GiB, 1: 10 * GiB}),
    ("cuda:1=10GiB", None, {0: int(80 * GiB * 0.9), 1: 10 * GiB}),
    ("0.9,cpu=64GiB", None, {0: int(80 * GiB * 0.9), 1: int(40 * GiB * 0.9), "cpu": 64 * GiB}),
    ({0: "20GB", 1: "20GB"}, None, {0: 20 * 10**9, 1: 20 * 10**9}),
    ({"0": 0.5, "cpu": "8GiB"}, None, {0: 40 * GiB, 1: int(40 * GiB * 0.9), "cpu": 8 * GiB}),
    ("20GiB", "32GiB", {0: 20 * GiB, 1: 20 * GiB, "cpu": 32 * GiB}),
    (None, "32GiB", {0: int(80 * GiB * 0.9), 1: int(40 * GiB * 0.9), "cpu": 32 * GiB}),
], ids=["none", "empty", "fraction-float", "fraction-str", "gib", "gb", "spaces-lowercase",
        "per-gpu", "cuda-prefix", "fraction-plus-cpu", "dict", "dict-mixed", "cpu-arg",
        "cpu-only"])
def test_parse_max_memory(spec: object, cpu: str | None, expected: dict | None) -> None:
    assert parse_max_memory(spec, TWO_GPUS, cpu) == expected


@pytest.mark.parametrize("spec, match", [
    ("lots", "invalid memory cap"),
    ("20", "fraction"),
    ("1.5", "fraction"),
    ("0", "fraction"),
    ("-1GiB", "invalid memory cap"),
    ("20XB", "invalid memory cap"),
    ("100GiB", "exceeds"),
    ("2:10GiB", "not visible"),
    ("gpu0:10GiB", "invalid device"),
    ("0.9,,cpu=1GiB", "empty item"),
    ("0:1GiB,0:2GiB", "given twice"),
    ("0.9,cpu=0.5", "cannot cap cpu"),
    ({0: True}, "invalid memory cap"),
], ids=["word", "bare-number", "fraction-over-one", "zero", "negative", "bad-unit",
        "over-gpu-total", "invisible-gpu", "bad-key", "empty-item", "duplicate",
        "cpu-fraction", "bool"])
def test_parse_max_memory_rejects_junk(spec: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        parse_max_memory(spec, TWO_GPUS)
    assert info.value.hint


def test_parse_max_memory_without_gpus() -> None:
    assert parse_max_memory("0.9", {}) is None
    assert parse_max_memory("0.9", {}, "16GiB") == {"cpu": 16 * GiB}


# -- choose_dtype ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind, bf16, override, expected", [
    ("cuda", True, "auto", "bfloat16"),
    ("cuda", False, "auto", "float16"),
    ("cpu", False, "auto", "float32"),
    ("cpu", True, "auto", "float32"),
    ("cuda", True, "fp32", "float32"),
    ("cuda", True, "float16", "float16"),
    ("cpu", False, "bf16", "bfloat16"),
    ("cuda", True, "AUTO", "bfloat16"),
], ids=["gpu-bf16", "old-gpu-fp16", "cpu", "cpu-ignores-bf16", "override-fp32",
        "override-fp16", "override-on-cpu", "case"])
def test_choose_dtype(kind: str, bf16: bool, override: str, expected: str) -> None:
    assert choose_dtype(kind, bf16, override) == expected


@pytest.mark.parametrize("kind, bf16, override, match", [
    ("cuda", False, "bfloat16", "no native bfloat16"),
    ("cpu", False, "int8", "unknown dtype"),
], ids=["bf16-on-old-gpu", "unknown"])
def test_choose_dtype_errors(kind: str, bf16: bool, override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        choose_dtype(kind, bf16, override)


# -- check_placement ------------------------------------------------------------------------
@pytest.mark.parametrize("device_map, cuda, allow", [
    ({"": 0}, True, False),
    ({"model.visual": 0, "model.language_model": 1, "lm_head": 1}, True, False),
    ({"": "cpu"}, False, False),
    ({"model.visual": 0, "model.language_model.layers.30": "cpu"}, True, True),
], ids=["one-gpu", "two-gpus", "cpu-only-machine", "offload-allowed"])
def test_check_placement_accepts(device_map: dict, cuda: bool, allow: bool) -> None:
    check_placement(device_map, cuda, allow)


@pytest.mark.parametrize("device_map, expected_in_message", [
    ({"model.visual": 0, "model.language_model.layers.30": "cpu", "lm_head": "cpu"},
     ["2 module(s)", "cpu", "layers.30"]),
    ({"model.visual": 0, "model.language_model": "disk"}, ["1 module(s)", "disk"]),
    ({f"model.language_model.layers.{i}": "cpu" for i in range(8)}, ["8 module(s)", "3 more"]),
], ids=["cpu-offload", "disk-offload", "many"])
def test_check_placement_refuses_offload(device_map: dict, expected_in_message: list) -> None:
    with pytest.raises(PlacementError) as info:
        check_placement(device_map, True, False, module_bytes={"lm_head": 2 * GiB})
    for text in expected_in_message:
        assert text in info.value.message
    assert "CHORD_ALLOW_OFFLOAD=1" in info.value.hint
    assert "max-memory" in info.value.hint and "smaller model" in info.value.hint


def test_check_placement_reports_offloaded_size() -> None:
    with pytest.raises(PlacementError, match=r"\(3\.0 GiB\)"):
        check_placement({"a": 0, "b": "cpu", "c": "cpu"}, True, False,
                        module_bytes={"b": GiB, "c": 2 * GiB})


# -- resolve_model / availability -----------------------------------------------------------
@pytest.fixture()
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


def _fake_snapshot(cache: Path, repo: str, files: dict[str, bytes]) -> Path:
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, data in files.items():
        (snap / name).write_bytes(data)
    return snap


@pytest.mark.parametrize("files, missing", [
    ({}, "config.json"),
    ({"config.json": b"{}"}, "*.safetensors"),
    ({"config.json": b"{}", "model.safetensors.index.json":
      b'{"weight_map": {"a": "model-00001-of-00002.safetensors"}}'},
     "model-00001-of-00002.safetensors"),
], ids=["empty", "no-weights", "missing-shard"])
def test_incomplete_local_folder_names_missing_files(tmp_path: Path, files: dict,
                                                     missing: str) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    with pytest.raises(ModelNotFoundError, match="incomplete") as info:
        hub.resolve_model(ModelConfig(model=str(tmp_path)))
    assert missing in info.value.message


@pytest.mark.parametrize("model", ["/nonexistent/qwen-folder", "./not-here", "~/no/such/dir"],
                         ids=["absolute", "relative", "home"])
def test_missing_local_folder(model: str) -> None:
    with pytest.raises(ModelNotFoundError, match="model folder not found"):
        hub.resolve_model(ModelConfig(model=model))


def test_complete_local_folder_resolves(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    resolved = hub.resolve_model(ModelConfig(model=str(tmp_path)))
    assert resolved.local_path == tmp_path and not resolved.is_test


def _assert_how_to_hint(err: ModelNotFoundError, repo: str) -> None:
    hint = err.hint
    assert f"hf download {repo} --local-dir" in hint
    assert "--model /path/to/" in hint and "CHORD_MODEL=/path/to/" in hint
    assert "HF_HUB_OFFLINE=1" in hint


@pytest.mark.usefixtures("empty_hf_cache")
def test_unknown_hub_id_offline_fails_fast_with_hint() -> None:
    t0 = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as info:
        hub.resolve_model(ModelConfig(model="nobody/does-not-exist-vl"))
    assert time.perf_counter() - t0 < 5
    _assert_how_to_hint(info.value, "nobody/does-not-exist-vl")


@pytest.mark.usefixtures("empty_hf_cache")
def test_unreachable_hub_fails_fast_with_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    t0 = time.perf_counter()
    with pytest.raises(ModelNotFoundError, match="unreachable") as info:
        hub.resolve_model(ModelConfig(model="Qwen/Qwen2.5-VL-3B-Instruct"))
    assert time.perf_counter() - t0 < 10
    _assert_how_to_hint(info.value, "Qwen/Qwen2.5-VL-3B-Instruct")


@pytest.mark.usefixtures("empty_hf_cache")
def test_local_files_only_never_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_model_info", lambda *a, **k: pytest.fail("probed the hub"))
    with pytest.raises(ModelNotFoundError, match="not in the local"):
        hub.resolve_model(ModelConfig(model="Qwen/Qwen2.5-VL-7B-Instruct", local_files_only=True))


def test_cached_hub_snapshot_resolves_offline(empty_hf_cache: Path) -> None:
    snap = _fake_snapshot(empty_hf_cache, "acme/vl-3b",
                          {"config.json": b"{}", "model.safetensors": b"1234"})
    resolved = hub.resolve_model(ModelConfig(model="acme/vl-3b"))
    assert resolved.path_or_id == "acme/vl-3b" and resolved.local_path == snap


def test_hub_probe_timeout_does_not_hang() -> None:
    release = threading.Event()
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        hub._with_timeout(lambda: release.wait(30), 0.2)
    release.set()
    assert time.perf_counter() - t0 < 2


@pytest.mark.parametrize("model, expected", [
    ("Qwen/Qwen2.5-VL-3B-Instruct", True), ("owner/name", True), ("/abs/path", False),
    ("./rel/path", False), ("a/b/c", False), ("../x/y", False), ("test", False),
    ("~/models", False),
], ids=["qwen", "simple", "absolute", "dot", "three-parts", "parent", "bare", "home"])
def test_is_hub_id(model: str, expected: bool) -> None:
    assert hub.is_hub_id(model) is expected


def test_availability_of_cached_and_missing_models(empty_hf_cache: Path) -> None:
    missing = hub.model_availability("acme/absent")
    assert not missing.available and "hf download acme/absent" in missing.message
    _fake_snapshot(empty_hf_cache, "acme/partial", {"config.json": b"{}"})
    partial = hub.model_availability("acme/partial")
    assert not partial.available and "partly downloaded" in partial.message
    _fake_snapshot(empty_hf_cache, "acme/full", {"config.json": b"{}", "model.safetensors": b"12"})
    full = hub.model_availability("acme/full")
    assert full.available and full.size_bytes == 2


def test_availability_of_folders_and_test_model(tmp_path: Path) -> None:
    assert not hub.model_availability(str(tmp_path / "nope")).available
    (tmp_path / "config.json").write_text("{}")
    assert "missing" in hub.model_availability(str(tmp_path)).message
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    ok = hub.model_availability(str(tmp_path))
    assert ok.available and ok.size_bytes == 3
    test = hub.model_availability("test")
    assert test.available and "random weights" in test.message


class _Sibling:
    def __init__(self, name: str, size: int) -> None:
        self.rfilename, self.size = name, size


def _fake_hub(monkeypatch: pytest.MonkeyPatch, download: object) -> None:
    import huggingface_hub

    siblings = [_Sibling("config.json", 100), _Sibling("model.safetensors", 900),
                _Sibling("README.md", 5000)]
    monkeypatch.setattr(hub, "hub_model_info",
                        lambda repo, timeout=0: type("Info", (), {"siblings": siblings})())
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)


def test_download_reports_byte_progress(empty_hf_cache: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_download(repo_id: str, *, cache_dir: str, **kwargs: object) -> str:
        assert "*.safetensors" in kwargs["allow_patterns"]
        blobs = Path(cache_dir) / "models--acme--vl" / "blobs"
        blobs.mkdir(parents=True)
        (blobs / "a").write_bytes(b"x" * 400)
        time.sleep(0.8)  # the poller reports twice a second
        return str(_fake_snapshot(Path(cache_dir), repo_id,
                                  {"config.json": b"{}", "model.safetensors": b"w"}))

    _fake_hub(monkeypatch, fake_download)
    calls: list[tuple[int, int]] = []
    path = hub.download_model("acme/vl", on_progress=lambda d, t: calls.append((d, t)))
    assert (path / "model.safetensors").is_file()
    assert (400, 1000) in calls and calls[-1] == (1000, 1000)


def test_download_failure_is_model_not_found(empty_hf_cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> str:
        raise RuntimeError("connection reset")

    _fake_hub(monkeypatch, broken)
    with pytest.raises(ModelNotFoundError, match="connection reset") as info:
        hub.download_model("acme/vl")
    assert "hf download acme/vl" in info.value.hint


def test_download_refuses_offline_without_network() -> None:
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        hub.download_model("acme/anything")


# -- prompts --------------------------------------------------------------------------------
@pytest.mark.parametrize("target, family, expected_parts", [
    ("red car", "qwen2.5-vl", ['"red car"', '"bbox_2d"', "output []"]),
    ('the "tall" man\n in blue', "qwen2.5-vl", ["'tall' man in blue"]),
    ("dog", "qwen3-vl", ["0-1000", '"bbox_2d"']),
], ids=["plain", "quotes-and-newlines", "qwen3-relative"])
def test_ground_messages(target: str, family: str, expected_parts: list) -> None:
    messages = prompts.ground_messages(target, family)
    assert [m["role"] for m in messages] == ["user"]
    image, text = messages[0]["content"]
    assert image == {"type": "image"} and text["type"] == "text"
    for part in expected_parts:
        assert part in text["text"]


@pytest.mark.parametrize("target, family, match", [
    ("   ", "qwen2.5-vl", "needs a target"),
    ("x" * 400, "qwen2.5-vl", "too long"),
    ("car", "llava", "unknown model family"),
], ids=["blank", "too-long", "family"])
def test_ground_prompt_errors(target: str, family: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        prompts.ground_messages(target, family)


@pytest.mark.parametrize("prompt, expected", [
    ("What happens?", "What happens?"),
    ("  ", prompts.DEFAULT_DESCRIBE_PROMPT),
], ids=["custom", "blank-uses-default"])
def test_describe_messages(prompt: str, expected: str) -> None:
    (message,) = prompts.describe_messages(prompt)
    assert message["content"] == [{"type": "video"}, {"type": "text", "text": expected}]
    assert prompts.PROMPT_VERSION
