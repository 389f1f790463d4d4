"""The frame readers' settings (listed in ``config.ENV_VARS``, read through ``env_value``):
which reader to try first, how many CPU decode processes and NVDEC sessions, and whether the
CPU reader decodes exactly or takes FFmpeg's two measured shortcuts."""

from __future__ import annotations

import os
from typing import Mapping

from chord_core.config import env_value
from chord_core.errors import ConfigError

__all__ = ["DECODE_MODES", "READERS", "decode_mode", "decode_procs", "nvdec_decoders",
           "reader_choice"]

READERS = ("auto", "nvdec", "cpu-pool", "default")
# exact: every frame as the encoder meant it. fast: the CPU reader skips each B-frame not
# sampled (FFmpeg's skip_frame=BIDIR, where x264's b-pyramid has P-frames refer to some)
# and H.264's loop filter: a worker's read 0.42-0.45x ffmpeg's CPU seconds against exact's
# 0.67-0.71x, frames a mean 0.65 of 255 levels off on real footage (docs/benchmarks.md, W4).
DECODE_MODES = ("exact", "fast")


def _choice(name: str, env: Mapping[str, str] | None, choices: tuple[str, ...]) -> str:
    raw = env_value(name, env).lower() or choices[0]
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}",
                          hint=f"unset it for the default ({choices[0]})")
    return raw


def reader_choice(env: Mapping[str, str] | None = None) -> str:
    """``CHORD_READER``: which frame reader to try first (``auto``: the fastest available)."""
    return _choice("CHORD_READER", env, READERS)


def decode_mode(env: Mapping[str, str] | None = None) -> str:
    """``CHORD_DECODE``: ``exact`` (default) or ``fast`` (see ``DECODE_MODES``)."""
    return _choice("CHORD_DECODE", env, DECODE_MODES)


def _count(name: str, env: Mapping[str, str] | None, default: int, top: int) -> int:
    raw = env_value(name, env)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= top:
        raise ConfigError(f"{name} must be a whole number 1–{top}, got {raw!r}",
                          hint=f"unset it for the default ({default})")
    return value


def decode_procs(env: Mapping[str, str] | None = None) -> int:
    """``CHORD_DECODE_PROCS``: processes of the CPU decode pool (default: cores, ≤ 8)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return _count("CHORD_DECODE_PROCS", env, max(1, min(8, cores)), 64)


def nvdec_decoders(env: Mapping[str, str] | None = None) -> int:
    """``CHORD_NVDEC_DECODERS``: NVDEC sessions per file on a GPU, one thread each (4)."""
    return _count("CHORD_NVDEC_DECODERS", env, 4, 32)
