"""Where the clips the app analyses live on disk, and the keys results are filed under.

Uploaded bytes are written once to ``<data dir>/uploads/<sha256 prefix><ext>``: the same clip
uploaded twice (or the same upload seen by many reruns) lands in the same file. A path typed by
the user is used in place and keyed by (path, size, mtime) so big local files are never hashed.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from chord_core.config import default_data_dir
from chord_core.errors import InputError

log = logging.getLogger(__name__)

VIDEO_TYPES = ("mp4", "avi", "mov", "mkv", "webm")
BROWSER_PLAYABLE = {".mp4", ".webm", ".mov"}
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ClipSource:
    """A clip ready to analyse: where it is, what to call it, and its results key."""

    path: str
    name: str
    key: str
    uploaded: bool


def uploads_dir(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / "uploads"


def exports_dir(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / "exports"


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:20]


def save_upload(name: str, data: bytes, data_dir: Path | None = None) -> ClipSource:
    """Write uploaded bytes under their content hash (once) and return the clip."""
    digest = content_hash(data)
    suffix = Path(name).suffix.lower()
    if suffix.lstrip(".") not in VIDEO_TYPES:
        suffix = ".bin"
    folder = uploads_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}{suffix}"
    if not path.exists() or path.stat().st_size != len(data):
        tmp = path.with_name(path.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        log.info("saved upload %s (%d bytes) to %s", name, len(data), path)
    return ClipSource(path=str(path), name=name, key=digest, uploaded=True)


def local_source(text: str) -> ClipSource:
    """A clip already on this machine. Raises InputError when the path is not a file."""
    path = Path(text.strip().strip('"').strip("'")).expanduser()
    if not path.exists():
        raise InputError(f"no file at {path}",
                         hint="check the path; it must be on the machine running Chord")
    if not path.is_file():
        raise InputError(f"{path} is a folder, not a video file",
                         hint="give the full path of one video file")
    path = path.resolve()
    stat = path.stat()
    raw = f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    key = "path-" + hashlib.sha256(raw).hexdigest()[:16]
    return ClipSource(path=str(path), name=path.name, key=key, uploaded=False)


def browser_playable(path: str) -> bool:
    """Whether st.video is likely to play this container in a browser."""
    return Path(path).suffix.lower() in BROWSER_PLAYABLE
