"""Content keys: what makes two analyses the same — the file's bytes (sha256, streamed and
cached per path/size/mtime), task, query, model and every setting that changes the result.
Equal keys = one job (the store and the job manager dedupe by it)."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Mapping

from chord_core.errors import VideoError
from chord_core.media.confined import source

_HASH_CACHE: dict[tuple[str, int, int], str] = {}
_HASH_LOCK = threading.Lock()
_HASH_CACHE_MAX = 4096
CHUNK = 1024 * 1024


def file_hash(path: str | Path) -> str:
    """sha256 of the file's bytes, streamed in 1 MiB chunks; cached per (path, size, mtime)."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise VideoError(f"cannot read video {path}: {exc.strerror or exc}",
                         hint="check that the file exists and is readable") from None
    cache_key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _HASH_LOCK:
        if cache_key in _HASH_CACHE:
            return _HASH_CACHE[cache_key]
    digest = hashlib.sha256()
    with source(path) as src, open(src, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    value = digest.hexdigest()
    with _HASH_LOCK:
        if len(_HASH_CACHE) >= _HASH_CACHE_MAX:
            _HASH_CACHE.pop(next(iter(_HASH_CACHE)))
        _HASH_CACHE[cache_key] = value
    return value


def remember_hash(path: str | Path, digest: str, mtime_ns: int | None = None) -> None:
    """``digest`` (sha256 hex) is the hash of the file at ``path`` as it is now: the caller
    just wrote those bytes (a stored upload) and hashed them on the way, so ``file_hash``
    need not read the file again. Cached under its size and mtime like a computed hash;
    ``mtime_ns``: the mtime the caller is about to give the file (remembered first, so no
    reader sees that mtime before its entry is here)."""
    path = Path(path)
    st = path.stat()
    stamp = st.st_mtime_ns if mtime_ns is None else mtime_ns
    with _HASH_LOCK:
        if len(_HASH_CACHE) >= _HASH_CACHE_MAX:
            _HASH_CACHE.pop(next(iter(_HASH_CACHE)))
        _HASH_CACHE[(str(path.resolve()), st.st_size, stamp)] = digest


def content_key(video_path: str | Path, task: str, query: str, model: str,
                sampling: Mapping[str, Any] | None = None) -> str:
    """What makes two analyses the same: file content, task, query, model and sampling.
    A renamed or copied file gives the same key; an edited one does not. Frames read with
    ``CHORD_DECODE=fast`` are near the exact ones, not equal: such a run's key says so, and
    an exact run (the default, whose keys are unchanged) is never answered from it."""
    from chord_core.media.reader_settings import decode_mode

    settings = dict(sampling or {})
    if decode_mode() == "fast":
        settings["decode"] = "fast"
    payload = json.dumps({"video_sha256": file_hash(video_path), "task": task,
                          "query": query.strip(), "model": model,
                          "sampling": settings},
                         sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
