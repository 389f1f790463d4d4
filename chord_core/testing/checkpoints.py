"""The tiny random-weight checkpoints by family (``model="test"`` / ``"test-qwen3"``): which
builder makes each, and building one once into the cache."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from chord_core.config import default_cache_dir
from chord_core.errors import ConfigError
from chord_core.testing import tiny_model, tiny_qwen3

log = logging.getLogger(__name__)

THINKING = "qwen3-vl-thinking"  # not a family: Qwen3-VL with the Thinking chat template


_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json",
                   "preprocessor_config.json", "chat_template.json")


def ensure_test_model(cache_dir: str | Path | None = None, family: str = "qwen2.5-vl"
                      ) -> Path:
    """The tiny checkpoint of ``family`` under ``<cache>/models/<dirname>``, built once
    (``tiny-qwen2.5-vl-v1``; ``tiny-qwen3-vl-v1`` for ``family="qwen3-vl"``).

    Built in a temporary sibling folder and renamed into place, so concurrent callers
    never see a half-written model.
    """
    dirname, build = family_builder(family)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / "models" / dirname
    if all((final / name).is_file() for name in _REQUIRED_FILES):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.exists():
        log.warning("test model at %s is incomplete; rebuilding it", final)
        shutil.rmtree(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dirname}-", dir=final.parent))
    try:
        build(tmp, shape="tiny", seed=0, device="cpu")
        os.rename(tmp, final)
    except OSError:
        if not (final / "model.safetensors").is_file():
            raise
        log.debug("another process built %s first", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def family_builder(family: str) -> tuple[str, Any]:
    """(cache folder name, build_checkpoint function) of a family's tiny checkpoint;
    ``qwen3-vl-thinking``: the Qwen3-VL one with the Thinking chat template."""
    if family == "qwen2.5-vl":
        return tiny_model.TEST_MODEL_DIRNAME, tiny_model.build_checkpoint
    if family == "qwen3-vl":
        return tiny_qwen3.TEST_MODEL_DIRNAME, tiny_qwen3.build_checkpoint
    if family == THINKING:
        return tiny_qwen3.THINKING_DIRNAME, partial(tiny_qwen3.build_checkpoint, thinking=True)
    raise ConfigError(f"no test checkpoint for model family {family!r}",
                      hint=f"use qwen2.5-vl, qwen3-vl or {THINKING}")
