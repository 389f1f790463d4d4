"""Shared fixtures. The default run is CPU-only and offline: the hub is never contacted, the
tiny random-weight checkpoint is built once per session into a temporary cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


# The tiers: `bash run_tests.sh` with no arguments leaves `slow` out (the default suite, meant
# to stay within 10 minutes on 2 cores); `bash run_tests.sh -m slow` runs the rest, and CI runs
# both. Every browser test (`e2e`) and every test on a local Ray head counts as slow.
_SLOW_MODULES = frozenset({"test_ray.py"})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("e2e") or item.path.name in _SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory):
    """Keep tests away from the user's caches, data and the network."""
    saved = dict(os.environ)
    for key in list(os.environ):
        if key.startswith("CHORD_"):
            del os.environ[key]
    os.environ["CHORD_CACHE_DIR"] = str(tmp_path_factory.mktemp("chord-cache"))
    os.environ["CHORD_DATA_DIR"] = str(tmp_path_factory.mktemp("chord-data"))
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random-weight Qwen2.5-VL checkpoint (what ``--model test`` loads)."""
    from chord_core.testing.checkpoints import ensure_test_model

    return ensure_test_model()


@pytest.fixture(scope="session")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("clips")
