"""multigpu_config.yaml + CHORD_* environment + CLI overrides → ParallelConfig."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from chord_core.errors import ConfigError
from chord_core.runtime.parallel_config import ParallelConfig, load_parallel_config

# Exactly as the original design documents show it.
ORIGINAL = """\
# multigpu_config.yaml (as the original documents show it)
parallel:
  strategy: data_parallel        # we also accept replicate / shard / auto
  num_gpus: 2
  batch_size_per_gpu: 8
  gradient_accumulation_steps: 2 # training-only: accepted, reported as ignored
memory:
  max_memory_allocated: 0.9      # fraction of each GPU the model may use
  pin_memory: true
communication:
  backend: nccl
  timeout: 1800
memory_optimization:             # optional block
  enable: true
  max_allocated_ratio: 0.85
  reserved_memory: 1024          # MB kept free
  fragmentation_threshold: 0.1
"""


def write(tmp_path: Path, text: str, name: str = "multigpu_config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_original_document_parses(tmp_path: Path) -> None:
    cfg = load_parallel_config(write(tmp_path, ORIGINAL), env={})
    assert cfg.strategy == "replicate"
    assert cfg.strategy_given == "data_parallel"
    assert (cfg.num_gpus, cfg.gpus, cfg.batch_size_per_gpu) == (2, None, 8)
    assert cfg.max_memory_fraction == pytest.approx(0.85)  # tightened by max_allocated_ratio
    assert cfg.max_allocated_ratio == pytest.approx(0.85)
    assert cfg.pin_memory is True
    assert (cfg.comm_backend, cfg.comm_timeout_s) == ("nccl", 1800.0)
    assert cfg.memory_optimization is True
    assert cfg.reserved_memory_mib == 1024
    assert cfg.reserve_bytes == 1024 * 1024 * 1024
    assert cfg.fragmentation_threshold == pytest.approx(0.1)
    assert cfg.gpu_weights == {} and cfg.weight(5) == 1.0
    assert cfg.cpu_workers == 0
    assert cfg.unknown == ()
    ignored_keys = {line.split(" — ")[0] for line in cfg.ignored}
    assert ignored_keys == {"parallel.gradient_accumulation_steps", "communication.backend",
                            "communication.timeout", "memory.pin_memory",
                            "memory_optimization.fragmentation_threshold"}
    report = cfg.report()
    assert "strategy replicate (from data_parallel)" in report
    assert any(line.startswith("ignored: parallel.gradient_accumulation_steps — training only")
               for line in report)
    assert any("tightened to 0.85" in line for line in report)


def test_to_dict_is_json_ready(tmp_path: Path) -> None:
    import json

    cfg = load_parallel_config(write(tmp_path, ORIGINAL), env={"CHORD_GPUS": "0,1",
                                                              "CHORD_GPU_WEIGHTS": "1:0.5"})
    data = json.loads(json.dumps(cfg.to_dict()))
    assert data["gpus"] == [0, 1]
    assert data["gpu_weights"] == {"0": 1.0, "1": 0.5}
    assert data["strategy"] == "replicate"


def test_pickles_for_worker_processes(tmp_path: Path) -> None:
    import pickle

    cfg = load_parallel_config(write(tmp_path, ORIGINAL), env={"CHORD_GPUS": "0,1"})
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and back.sources == cfg.sources and back.gpus == (0, 1)


def test_defaults_without_file() -> None:
    cfg = load_parallel_config(None, env={})
    assert cfg == ParallelConfig()
    assert (cfg.strategy, cfg.num_gpus, cfg.batch_size_per_gpu, cfg.max_memory_fraction,
            cfg.reserved_memory_mib) == ("auto", None, 8, 0.9, 0)
    assert cfg.report()[0] == "config: defaults (no file)"


@pytest.mark.parametrize(
    ("env", "overrides", "expected"),
    [
        ({}, {}, {"strategy": "replicate", "batch_size_per_gpu": 8, "num_gpus": 2}),
        ({"CHORD_STRATEGY": "shard", "CHORD_BATCH_SIZE": "4", "CHORD_NUM_GPUS": "4"}, {},
         {"strategy": "shard", "batch_size_per_gpu": 4, "num_gpus": 4}),
        ({"CHORD_STRATEGY": "shard", "CHORD_BATCH_SIZE": "4"},
         {"strategy": "auto", "batch_size_per_gpu": 2},
         {"strategy": "auto", "batch_size_per_gpu": 2}),
        ({"CHORD_BATCH_SIZE": "4"}, {"batch_size_per_gpu": None, "strategy": None},
         {"batch_size_per_gpu": 4, "strategy": "replicate"}),
        ({"CHORD_MAX_MEMORY": "0.5"}, {}, {"max_memory_fraction": 0.5}),
        ({"CHORD_MAX_MEMORY": "0.5"}, {"max_memory_fraction": 0.7},
         {"max_memory_fraction": 0.7}),
        ({"CHORD_MAX_MEMORY": "20GiB,cpu=30GiB"}, {}, {"max_memory_fraction": 0.85}),
        ({"CHORD_MAX_MEMORY": "0.6,cpu=30GiB"}, {}, {"max_memory_fraction": 0.6}),
        ({"CHORD_CPU_WORKERS": "3"}, {}, {"cpu_workers": 3}),
        ({"CHORD_CPU_WORKERS": "3"}, {"cpu_workers": 0}, {"cpu_workers": 0}),
        ({"CHORD_STRATEGY": ""}, {}, {"strategy": "replicate"}),
    ],
    ids=["file", "env-beats-file", "override-beats-env", "none-is-unset", "env-fraction",
         "override-fraction", "env-size-leaves-fraction", "env-fraction-with-cpu",
         "env-cpu-workers", "override-zero-beats-env", "empty-env-is-unset"],
)
def test_precedence(tmp_path: Path, env: dict, overrides: dict, expected: dict) -> None:
    cfg = load_parallel_config(write(tmp_path, ORIGINAL), env=env, overrides=overrides)
    for name, value in expected.items():
        want = pytest.approx(value) if isinstance(value, float) else value
        assert getattr(cfg, name) == want, name


def test_sources_are_reported(tmp_path: Path) -> None:
    cfg = load_parallel_config(write(tmp_path, ORIGINAL), env={"CHORD_BATCH_SIZE": "4"},
                               overrides={"strategy": "shard"})
    assert cfg.sources["batch_size_per_gpu"] == "env"
    assert cfg.sources["strategy"] == "option"
    assert cfg.sources["num_gpus"] == "file"
    assert "batch size per GPU 4 (env)" in cfg.report()


def test_environment_is_read_when_env_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORD_NUM_GPUS", "3")
    assert load_parallel_config(None).num_gpus == 3


@pytest.mark.parametrize(
    ("env", "expected_gpus", "expected_weights"),
    [
        ({"CHORD_GPU_WEIGHTS": "0:1.0,1:0.8"}, None, {0: 1.0, 1: 0.8}),
        ({"CHORD_GPU_WEIGHTS": " 0 : 2 , 3:0.25 "}, None, {0: 2.0, 3: 0.25}),
        ({"CHORD_GPUS": "0,1,2", "CHORD_GPU_WEIGHTS": "1:0.5"}, (0, 1, 2),
         {0: 1.0, 1: 0.5, 2: 1.0}),
        ({"CHORD_GPUS": "2,5"}, (2, 5), {2: 1.0, 5: 1.0}),
    ],
    ids=["two-weights", "spaces-and-ints", "weights-filled-for-listed-gpus", "gpus-only"],
)
def test_gpu_weights_from_env(env: dict, expected_gpus: tuple | None,
                              expected_weights: dict) -> None:
    cfg = load_parallel_config(None, env=env)
    assert cfg.gpus == expected_gpus
    assert cfg.gpu_weights == expected_weights
    for gpu, weight in expected_weights.items():
        assert cfg.weight(gpu) == weight


def test_gpu_weights_and_gpus_from_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, """\
        parallel:
          gpus: [1, 3]
          gpu_weights: {1: 1.0, 3: 0.5}
          cpu_workers: 2
        """)
    cfg = load_parallel_config(path, env={})
    assert cfg.gpus == (1, 3) and cfg.num_gpus == 2
    assert cfg.gpu_weights == {1: 1.0, 3: 0.5}
    assert cfg.cpu_workers == 2
    assert "GPU weights: 1=1, 3=0.5" in cfg.report()


@pytest.mark.parametrize(
    ("yaml_text", "env", "overrides", "gpus", "num"),
    [
        ("parallel:\n  num_gpus: 2\n", {"CHORD_GPUS": "0,1,2"}, {}, (0, 1, 2), 3),
        ("parallel:\n  gpus: [0, 1, 2, 3]\n", {}, {"num_gpus": 2}, (0, 1), 2),
        ("parallel:\n  gpus: [4, 5]\n", {}, {}, (4, 5), 2),
        ("parallel:\n  gpus: [4, 5]\n  num_gpus: all\n", {}, {}, (4, 5), 2),
    ],
    ids=["env-gpus-beat-file-count", "option-count-trims-file-gpus", "count-from-list",
         "all-means-listed"],
)
def test_gpus_and_count_agree(tmp_path: Path, yaml_text: str, env: dict, overrides: dict,
                              gpus: tuple, num: int) -> None:
    cfg = load_parallel_config(write(tmp_path, yaml_text), env=env, overrides=overrides)
    assert (cfg.gpus, cfg.num_gpus) == (gpus, num)


@pytest.mark.parametrize(
    ("yaml_text", "env", "overrides", "needle"),
    [
        ("parallel:\n  num_gpus: 3\n  gpus: [0, 1]\n", {}, {}, "num_gpus is 3 but gpus lists 2"),
        ("parallel:\n  gpus: [0, 1]\n", {}, {"num_gpus": 4}, "num_gpus is 4 but gpus lists 2"),
        ("parallel:\n  gpus: [0, 1]\n  gpu_weights: {2: 0.5}\n", {}, {},
         "gpu_weights names GPU(s) [2]"),
    ],
    ids=["same-layer-conflict", "count-above-list", "weight-for-unlisted-gpu"],
)
def test_gpu_conflicts(tmp_path: Path, yaml_text: str, env: dict, overrides: dict,
                       needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_parallel_config(write(tmp_path, yaml_text), env=env, overrides=overrides)
    assert needle in info.value.message


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("parallel:\n  batch_size_per_gpus: 4\n",
         "parallel.batch_size_per_gpus is not a known key; did you mean batch_size_per_gpu?"),
        ("paralel:\n  num_gpus: 2\n", "paralel is not a known section; did you mean parallel?"),
        ("parallel:\n  max_memory_allocated: 0.5\n",
         "parallel.max_memory_allocated is not a known key; did you mean "
         "memory.max_memory_allocated?"),
        ("batch_size_per_gpu: 4\n",
         "batch_size_per_gpu is not a known section; did you mean parallel.batch_size_per_gpu?"),
        ("parallel:\n  zzz: 1\n", "parallel.zzz is not a known key (known in parallel:"),
    ],
    ids=["typo-key", "typo-section", "key-in-wrong-section", "key-at-top-level", "no-guess"],
)
def test_unknown_keys_warn_with_suggestion(tmp_path: Path, yaml_text: str, expected: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_parallel_config(write(tmp_path, yaml_text), env={})
    assert len(cfg.unknown) == 1 and cfg.unknown[0].startswith(expected)
    assert f"unknown: {cfg.unknown[0]}" in cfg.report()
    assert expected in caplog.text
    assert cfg.batch_size_per_gpu == 8  # the misspelt value is not used


def test_optimisation_values_ignored_when_disabled(tmp_path: Path) -> None:
    text = ORIGINAL.replace("enable: true", "enable: false")
    cfg = load_parallel_config(write(tmp_path, text), env={})
    assert cfg.memory_optimization is False
    assert cfg.max_memory_fraction == pytest.approx(0.9)
    assert cfg.reserved_memory_mib == 0 and cfg.max_allocated_ratio is None
    assert any(line.startswith("memory_optimization.reserved_memory — "
                               "memory_optimization.enable is not true") for line in cfg.ignored)


def test_optimisation_block_is_optional(tmp_path: Path) -> None:
    text = ORIGINAL.split("memory_optimization:")[0]
    cfg = load_parallel_config(write(tmp_path, text), env={})
    assert cfg.max_memory_fraction == pytest.approx(0.9)
    assert cfg.reserved_memory_mib == 0


@pytest.mark.parametrize(
    ("section", "key", "value", "needle"),
    [
        ("parallel", "strategy", "magic", "parallel.strategy must be one of auto"),
        ("parallel", "num_gpus", "0", "parallel.num_gpus must be a whole number ≥ 1"),
        ("parallel", "num_gpus", "-1", "parallel.num_gpus must be a whole number ≥ 1"),
        ("parallel", "num_gpus", "two", "parallel.num_gpus must be a whole number ≥ 1"),
        ("parallel", "num_gpus", "1.5", "parallel.num_gpus must be a whole number ≥ 1"),
        ("parallel", "batch_size_per_gpu", "0", "parallel.batch_size_per_gpu must be a whole"),
        ("parallel", "batch_size_per_gpu", "true", "parallel.batch_size_per_gpu must be a whole"),
        ("parallel", "gpus", "[0, 0]", "parallel.gpus must be a non-empty list without repeats"),
        ("parallel", "gpus", "[-1]", "parallel.gpus must be a list of GPU numbers"),
        ("parallel", "gpu_weights", "{0: 0}", "parallel.gpu_weights (GPU 0) must be in (0,"),
        ("parallel", "cpu_workers", "-2", "parallel.cpu_workers must be a whole number ≥ 0"),
        ("memory", "max_memory_allocated", "0", "memory.max_memory_allocated must be in (0, 1]"),
        ("memory", "max_memory_allocated", "1.5",
         "memory.max_memory_allocated must be in (0, 1], got 1.5"),
        ("memory", "max_memory_allocated", ".nan", "memory.max_memory_allocated must be in"),
        ("memory", "pin_memory", "maybe", "memory.pin_memory must be true or false"),
        ("communication", "timeout", "-5", "communication.timeout must be in (0,"),
        ("memory_optimization", "reserved_memory", "-1",
         "memory_optimization.reserved_memory must be a whole number ≥ 0"),
        ("memory_optimization", "max_allocated_ratio", "2",
         "memory_optimization.max_allocated_ratio must be in (0, 1]"),
    ],
    ids=["strategy-magic", "num-gpus-0", "num-gpus-neg", "num-gpus-two", "num-gpus-float",
         "batch-0", "batch-bool", "gpus-repeat", "gpus-negative", "weight-0", "cpu-workers-neg",
         "fraction-0", "fraction-1.5", "fraction-nan", "pin-maybe", "timeout-neg",
         "reserved-neg", "ratio-2"],
)
def test_invalid_values_name_file_and_key(tmp_path: Path, section: str, key: str, value: str,
                                          needle: str) -> None:
    path = write(tmp_path, f"memory_optimization:\n  enable: true\n{section}:\n  {key}: {value}\n"
                 if section != "memory_optimization" else
                 f"{section}:\n  enable: true\n  {key}: {value}\n")
    with pytest.raises(ConfigError) as info:
        load_parallel_config(path, env={})
    message = info.value.message
    assert message.startswith("multigpu_config.yaml: ")
    assert needle in message
    assert str(path) in info.value.hint  # the full path, to find the file


def test_invalid_value_message_exact(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  max_memory_allocated: 1.5\n")
    with pytest.raises(ConfigError) as info:
        load_parallel_config(path, env={})
    assert info.value.message == ("multigpu_config.yaml: memory.max_memory_allocated must be "
                                  "in (0, 1], got 1.5")


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"CHORD_NUM_GPUS": "two"}, "environment variable CHORD_NUM_GPUS must be"),
        ({"CHORD_STRATEGY": "magic"}, "environment variable CHORD_STRATEGY must be one of"),
        ({"CHORD_GPUS": "0,x"}, "environment variable CHORD_GPUS must be a list"),
        ({"CHORD_BATCH_SIZE": "0"}, "environment variable CHORD_BATCH_SIZE must be"),
        ({"CHORD_MAX_MEMORY": "1.5"}, "environment variable CHORD_MAX_MEMORY must be in (0, 1]"),
        ({"CHORD_MAX_MEMORY": "lots"}, "environment variable CHORD_MAX_MEMORY must be a fraction"),
        ({"CHORD_GPU_WEIGHTS": "0=1"}, "environment variable CHORD_GPU_WEIGHTS must be GPU:weight"),
        ({"CHORD_GPU_WEIGHTS": "0:-1"}, "CHORD_GPU_WEIGHTS (GPU 0) must be in (0,"),
        ({"CHORD_CPU_WORKERS": "many"}, "environment variable CHORD_CPU_WORKERS must be"),
    ],
    ids=["num-gpus", "strategy", "gpus", "batch", "fraction-range", "fraction-garbage",
         "weights-syntax", "weights-negative", "cpu-workers"],
)
def test_invalid_env(env: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_parallel_config(None, env=env)
    assert needle in info.value.message


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"num_gpus": 0}, "option num_gpus must be a whole number ≥ 1"),
        ({"max_memory_fraction": 1.5}, "option max_memory_fraction must be in (0, 1]"),
        ({"strategy": "magic"}, "option strategy must be one of"),
        ({"num_gpu": 2}, "unknown parallel option(s): num_gpu"),
    ],
    ids=["num-gpus", "fraction", "strategy", "unknown-option"],
)
def test_invalid_overrides(overrides: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_parallel_config(None, env={}, overrides=overrides)
    assert needle in info.value.message


def test_bad_file_value_fails_even_when_overridden(tmp_path: Path) -> None:
    path = write(tmp_path, "parallel:\n  num_gpus: two\n")
    with pytest.raises(ConfigError, match="parallel.num_gpus"):
        load_parallel_config(path, env={"CHORD_NUM_GPUS": "2"})


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("parallel:\n  num_gpus: 2\n  strategy: [replicate\nmemory:\n  pin_memory: true\n", 4),
        ("parallel:\n  num_gpus: 2\n bad_indent: 1\n", 3),
        ("parallel:\n\tnum_gpus: 2\n", 2),
    ],
    ids=["unclosed-bracket", "bad-indent", "tab"],
)
def test_bad_yaml_names_line(tmp_path: Path, text: str, line: int) -> None:
    with pytest.raises(ConfigError) as info:
        load_parallel_config(write(tmp_path, text), env={})
    assert info.value.message.startswith(f"multigpu_config.yaml line {line}")
    assert "invalid YAML" in info.value.message


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- parallel\n- memory\n", "the top level must be a mapping"),
        ("parallel: 3\n", "parallel must be a mapping of keys"),
    ],
    ids=["list-document", "section-not-mapping"],
)
def test_wrong_shape(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_parallel_config(write(tmp_path, text), env={})


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    cfg = load_parallel_config(write(tmp_path, "# nothing yet\n"), env={})
    assert cfg.strategy == "auto" and cfg.unknown == () and cfg.ignored == ()


def test_missing_file_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "multigpu_config.yaml"
    with pytest.raises(ConfigError) as info:
        load_parallel_config(missing, env={})
    assert str(missing) in info.value.message


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"strategy": "magic"}, "ParallelConfig.strategy must be one of"),
        ({"max_memory_fraction": 0.0}, "ParallelConfig.max_memory_fraction must be in (0, 1]"),
        ({"batch_size_per_gpu": 0}, "ParallelConfig.batch_size_per_gpu must be"),
    ],
    ids=["strategy", "fraction", "batch"],
)
def test_direct_construction_is_validated(kwargs: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        ParallelConfig(**kwargs)
    assert needle in info.value.message


@pytest.mark.parametrize(
    ("kwargs", "expected", "report_line"),
    [
        ({"strategy": "data_parallel", "gpus": "0,1"}, ("replicate", (0, 1)),
         "strategy replicate (from data_parallel)"),
        ({"strategy": " Shard "}, ("shard", None), "strategy shard"),
        ({"strategy": None}, ("auto", None), "strategy auto"),
    ],
    ids=["alias-and-gpu-string", "case-and-spaces", "none-is-auto"],
)
def test_direct_construction_normalises(kwargs: dict, expected: tuple, report_line: str) -> None:
    cfg = ParallelConfig(**kwargs)
    assert (cfg.strategy, cfg.gpus) == expected
    assert report_line in cfg.report()
