"""Worker start-up helpers: the bytecode cache for installs without valid bytecode."""

from __future__ import annotations

import os
import py_compile
import sys
from importlib.machinery import ModuleSpec

import pytest

from chord_core.runtime import startup


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text("X = 1\n")
    return path


def test_bytecode_validity_follows_the_source(source):
    assert not startup.bytecode_valid(str(source))  # never compiled
    py_compile.compile(str(source), doraise=True)
    assert startup.bytecode_valid(str(source))
    st = source.stat()
    os.utime(source, (st.st_atime, st.st_mtime + 10))  # a copy that did not keep times
    assert not startup.bytecode_valid(str(source))


@pytest.mark.parametrize("compiled, want_prefix", [(True, False), (False, True)],
                         ids=["valid-bytecode-left-alone", "no-bytecode-cached-in-chord"])
def test_worker_caches_bytecode_only_where_the_install_has_none(
        source, tmp_path, monkeypatch, compiled, want_prefix):
    if compiled:
        py_compile.compile(str(source), doraise=True)
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: ModuleSpec(name, None, origin=str(source)))
    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    startup.bytecode_cache()
    if want_prefix:
        assert sys.pycache_prefix == str(tmp_path / "cache" / "pycache")
        assert not sys.dont_write_bytecode
    else:
        assert sys.pycache_prefix is None and sys.dont_write_bytecode


def test_weights_are_prefetched_for_a_folder_and_not_for_a_hub_id(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "model-00001.safetensors").write_bytes(b"x" * 5000)
    (tmp_path / "config.json").write_text("{}")
    assert startup.prefetch_weights(str(tmp_path)) == 5000
    assert startup.prefetch_weights("Qwen/Qwen2.5-VL-7B-Instruct") == 0
