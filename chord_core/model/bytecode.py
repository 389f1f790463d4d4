"""Compiled Python bytecode for the model stack's imports, kept under the Chord cache where
the installed packages have none that is valid (the H200 hosts set PYTHONDONTWRITEBYTECODE
and their torch ships no ``.pyc``): otherwise every process that loads a model — a worker,
``describe --local``, an in-process ``Engine`` — compiles torch, transformers and the
compiler stack from source again, seconds of every start (``docs/benchmarks.md``).
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def bytecode_cache() -> None:
    """Keep compiled Python bytecode for this worker's imports under the Chord cache when the
    installed packages carry none that is valid (a read-only or copied environment, or
    PYTHONDONTWRITEBYTECODE): otherwise every worker start compiles torch, transformers and
    the compiler stack from source again — seconds of each start. Call before importing
    them. A normal install (valid ``__pycache__`` next to the sources) is left alone."""
    import importlib.util
    import sys

    if sys.pycache_prefix:
        return
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin or bytecode_valid(spec.origin):
        return
    from chord_core.config import default_cache_dir

    sys.pycache_prefix = str(default_cache_dir() / "pycache")
    sys.dont_write_bytecode = False  # into Chord's cache, never next to the sources
    log.info("installed packages have no valid bytecode; caching it in %s", sys.pycache_prefix)


def bytecode_valid(source: str) -> bool:
    """Whether the bytecode Python would read for ``source`` exists and matches it (the
    timestamp check importlib does)."""
    import importlib.util

    try:
        with open(importlib.util.cache_from_source(source), "rb") as f:
            head = f.read(16)
        st = os.stat(source)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") & 1:  # hash-based bytecode: checked differently
        return True
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)
