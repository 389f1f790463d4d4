"""A search hit's thumbnail: the clip's frame at a moment, as a small JPEG.

PyAV seeks to the keyframe before the moment and decodes forward to the first frame whose
presentation time reaches it (never a time computed from an average fps). The clip is the
one the store says a job analysed: callers pass a source id, never a path from a request.
That clip is opened under the media roots at the moment it is read (``media.confined.
opened``): a clip replaced by a symlink to a file elsewhere since it was analysed is refused,
never pictured. Made once per (file, size, mtime, moment) and kept under
``<data dir>/thumbs`` (private), at most MAX_CACHED files there: the oldest go first.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from pathlib import Path
from typing import Sequence

from chord_core.errors import InputError, VideoError

log = logging.getLogger(__name__)

THUMB_W = 320
MAX_CACHED = 2000  # files kept in the thumbs folder (≈ 20 KB each: ≈ 40 MB at most)


def _cache_file(cache_dir: Path, st: os.stat_result, t_s: float, width: int) -> Path:
    key = f"{st.st_dev}:{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{t_s:.3f}|{width}"
    return cache_dir / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".jpg")


def prune(cache_dir: Path, keep: int | None = None) -> int:
    """Delete the oldest files of ``cache_dir`` until at most ``keep`` (MAX_CACHED) are
    left; how many went. One folder listing; files another process removed are skipped."""
    keep = MAX_CACHED if keep is None else keep
    try:
        with os.scandir(cache_dir) as it:
            entries = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path)
                       for e in it if e.is_file(follow_symlinks=False)]
    except OSError:
        return 0
    if len(entries) <= keep:
        return 0
    entries.sort()
    gone = 0
    for _, name in entries[:len(entries) - keep]:
        try:
            os.unlink(name)
            gone += 1
        except OSError:
            pass
    return gone


def frame_jpeg(path: str | Path, t_s: float, width: int = THUMB_W,
               name: str = "") -> bytes:
    """The frame shown at ``t_s`` seconds (the last frame when past the end), ``width``
    pixels wide, as JPEG bytes; ``path`` is what is opened (a ``/proc/self/fd`` name),
    ``name`` the clip's name in messages. Raises VideoError for a file that cannot be read."""
    import av
    from PIL import Image

    from chord_core.media.confined import source

    p = Path(name or path)
    try:
        with source(path) as opened_name, av.open(opened_name) as container:
            stream = container.streams.video[0]
            tb = stream.time_base
            if tb is None:
                raise IndexError("its video stream has no time base")  # said as VideoError
            base = float(stream.start_time * tb) if stream.start_time else 0.0
            target = base + max(0.0, float(t_s))
            container.seek(int(target / tb), stream=stream, backward=True)
            image = None
            for frame in container.decode(stream):
                image = frame.to_image()
                if frame.time is not None and frame.time >= target - 1e-3:
                    break
    except (OSError, av.error.FFmpegError, IndexError) as exc:
        raise VideoError(f"cannot read a frame of {p.name}: {exc}",
                         hint="the clip may have been moved, deleted or damaged since it "
                              "was analysed") from None
    if image is None:
        raise VideoError(f"{p.name} has no frame at {t_s:.2f} s",
                         hint="the clip may have been cut short since it was analysed")
    height = max(2, round(image.height * width / max(1, image.width)))
    out = io.BytesIO()
    image.convert("RGB").resize((width, height)).save(out, "JPEG", quality=80)
    return out.getvalue()


def thumbnail(path: str | Path, t_s: float, cache_dir: Path, width: int = THUMB_W, *,
              roots: Sequence[str | Path]) -> bytes:
    """``frame_jpeg`` of ``path`` opened under ``roots`` (a refusal is a VideoError that
    does not say why), through the cache folder (made 0700, files 0600, bounded)."""
    from chord_core.media.confined import opened

    p = Path(path)
    try:
        with opened(p, [str(r) for r in roots]) as (name, st):
            cached = _cache_file(cache_dir, st, t_s, width)
            if cached.is_file():
                return cached.read_bytes()
            data = frame_jpeg(name, t_s, width, name=p.name)
    except InputError:
        raise VideoError(f"{p.name} is no longer a file under the media roots",
                         hint="the clip was moved, deleted or replaced (by a link to a file "
                              "elsewhere) after it was analysed") from None
    _store(cache_dir, cached, data)
    return data


def _store(cache_dir: Path, cached: Path, data: bytes) -> None:
    try:
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, cached)
    except OSError as exc:  # a full disk costs the cache, not the thumbnail
        log.warning("thumbnail not cached in %s: %s", cache_dir, exc)
        return
    prune(cache_dir)
