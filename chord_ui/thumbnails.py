"""Small thumbnails of clips for the History table, cached on disk.

A thumbnail is a JPEG about THUMB_W pixels wide of the clip's first frame that is not black
(the poster's rule, ``clip_view.poster_indices``), kept under ``<data dir>/thumbs`` by the
file's path, size and modification time, and handed to ``st.column_config.ImageColumn`` as a
data URI. Only a file the app may show (under the media roots or the uploads folder) is
read, opened under them at the moment it is read (``media.confined.opened``: a clip swapped
for a link to a file elsewhere is refused, never pictured); a gone, refused or unreadable
file gets no thumbnail (None), and a file that could not be read is remembered so that each
rerun does not decode it again.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
from pathlib import Path

from chord_core.config import default_data_dir
from chord_core.errors import ChordError

log = logging.getLogger(__name__)

THUMB_W = 96
_DARK = 24  # mean brightness under which a candidate frame counts as black


def thumbs_dir(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / "thumbs"


def _cache_file(path: str, st: os.stat_result, data_dir: Path | None) -> Path:
    key = hashlib.sha1(f"{path}|{st.st_dev}:{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"
                       .encode()).hexdigest()[:24]
    return thumbs_dir(data_dir) / f"{key}.jpg"


def _make(path: str, out: Path) -> None:
    """Decode the poster frame of ``path`` at THUMB_W wide and write it as a JPEG."""
    from PIL import Image

    from chord_core.media.probe import probe
    from chord_core.media.video import read_frames
    from chord_ui.clip_view import poster_indices

    info = probe(path)
    w = min(THUMB_W, max(2, info.width))
    h = max(2, round(info.height * w / max(1, info.width)))
    frames, _ = read_frames(path, poster_indices(info), size_wh=(w, h))
    bright = [f for f in frames if float(f.mean()) >= _DARK]
    frame = bright[0] if bright else max(frames, key=lambda f: float(f.mean()))
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=80)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, out)


def thumbnail_uri(video_path: str, data_dir: Path | None = None) -> str | None:
    """The clip's thumbnail as a ``data:image/jpeg`` URI, or None (no file, not allowed,
    not readable)."""
    from chord_core.errors import InputError
    from chord_core.library.thumbs import prune
    from chord_core.media.confined import opened
    from chord_core.media.roots import is_video_name, job_roots

    if not video_path or not is_video_name(video_path) or not os.path.isfile(video_path):
        return None  # gone: no close-names scan
    try:
        with opened(video_path, job_roots()) as (name, st):
            out = _cache_file(os.path.abspath(video_path), st, data_dir)
            failed = out.with_suffix(".none")
            if out.exists():
                return _uri(out)
            if failed.exists():
                return None
            try:
                _make(name, out)
            except (ChordError, OSError, ValueError, IndexError) as exc:
                log.info("no thumbnail of %s: %s", video_path, exc)
                failed.parent.mkdir(parents=True, exist_ok=True)
                failed.touch()
                return None
    except InputError:  # outside the roots, or swapped for a link since
        return None
    prune(out.parent)
    return _uri(out)


def _uri(out: Path) -> str | None:
    try:
        data = out.read_bytes()
    except OSError:
        return None
    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
