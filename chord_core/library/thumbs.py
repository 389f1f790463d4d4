"""A search hit's thumbnail: the clip's frame at a moment, as a small JPEG.

PyAV seeks to the keyframe before the moment and decodes forward to the first frame whose
presentation time reaches it (never a time computed from an average fps). The clip is the
one the store says a job analysed: callers pass a source id, never a path from a request.
Made once per (clip, size, mtime, moment) and kept under ``<data dir>/thumbs`` (private).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from pathlib import Path

from chord_core.errors import VideoError

log = logging.getLogger(__name__)

THUMB_W = 320


def _cache_file(cache_dir: Path, path: Path, t_s: float, width: int) -> Path:
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{t_s:.3f}|{width}"
    return cache_dir / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".jpg")


def frame_jpeg(path: str | Path, t_s: float, width: int = THUMB_W) -> bytes:
    """The frame shown at ``t_s`` seconds (the last frame when past the end), ``width``
    pixels wide, as JPEG bytes. Raises VideoError for a file that cannot be read."""
    import av
    from PIL import Image

    p = Path(path)
    try:
        with av.open(str(p)) as container:
            stream = container.streams.video[0]
            base = float(stream.start_time * stream.time_base) if stream.start_time else 0.0
            target = base + max(0.0, float(t_s))
            container.seek(int(target / stream.time_base), stream=stream, backward=True)
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


def thumbnail(path: str | Path, t_s: float, cache_dir: Path, width: int = THUMB_W) -> bytes:
    """``frame_jpeg`` through the cache folder (made 0700, files 0600)."""
    p = Path(path)
    if not p.is_file():
        raise VideoError(f"{p.name} is no longer at {p.parent}",
                         hint="the clip was moved or deleted after it was analysed")
    cached = _cache_file(cache_dir, p, t_s, width)
    if cached.is_file():
        return cached.read_bytes()
    data = frame_jpeg(p, t_s, width)
    try:
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.part")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, cached)
    except OSError as exc:  # a full disk costs the cache, not the thumbnail
        log.warning("thumbnail not cached in %s: %s", cache_dir, exc)
    return data
