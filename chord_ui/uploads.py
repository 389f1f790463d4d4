"""Where the clips the app analyses live on disk, and the keys results are filed under.

Uploaded bytes are written once to ``<data dir>/uploads/<sha256 prefix><ext>``: the same clip
uploaded twice (or the same upload seen by many reruns) lands in the same file, written in
chunks and private to this user. A path typed by the user is used in place, only under the
media roots (``chord_core.media.roots``), and keyed by (path, size, mtime) so big local files
are never hashed.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from chord_core.config import default_data_dir
from chord_core.errors import InputError
from chord_core.media.confined import confine
from chord_core.media.roots import VIDEO_EXTENSIONS, job_roots, resolve_video

log = logging.getLogger(__name__)

VIDEO_TYPES = VIDEO_EXTENSIONS
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


def private_dir(folder: Path) -> Path:
    """Create ``folder`` (and the data dir above it) readable by this user only."""
    for d in (folder.parent, folder):
        if not d.exists():
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    return folder


def _copy_hashing(src: BinaryIO, dst: BinaryIO) -> tuple[str, int]:
    """Copy ``src`` to ``dst`` in chunks, hashing as it goes: (digest, bytes)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := src.read(_CHUNK):
        digest.update(chunk)
        dst.write(chunk)
        size += len(chunk)
    return digest.hexdigest()[:20], size


def save_upload(name: str, data: bytes | BinaryIO, data_dir: Path | None = None) -> ClipSource:
    """Write an upload under its content hash (once) and return the clip.

    ``data`` may be bytes or a file object (Streamlit's UploadedFile): it is copied to disk in
    1 MiB chunks while hashed, so saving adds no second copy of the upload in memory. The
    file is private to this user (0600); a failed copy leaves nothing behind."""
    src: BinaryIO = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    src.seek(0)
    suffix = Path(name).suffix.lower()
    if suffix.lstrip(".") not in VIDEO_TYPES:
        suffix = ".bin"
    folder = private_dir(uploads_dir(data_dir))
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=".upload-", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest, size = _copy_hashing(src, out)
        path = folder / f"{digest}{suffix}"
        if path.exists() and path.stat().st_size == size:
            tmp.unlink()
        else:
            os.replace(tmp, path)
            log.info("saved upload %s (%d bytes) to %s", name, size, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return ClipSource(path=str(path), name=name, key=digest, uploaded=True)


def discard_upload(clip: ClipSource) -> None:
    """Remove an uploaded file the probe refused (only files in the uploads folder)."""
    path = Path(clip.path)
    if clip.uploaded and path.parent.resolve() == uploads_dir().resolve():
        path.unlink(missing_ok=True)
        log.info("removed refused upload %s (%s)", clip.name, path)


def local_source(text: str) -> ClipSource:
    """A clip already on this machine, typed into a path box: only a regular video file
    under the media roots (``chord_core.media.roots``). Raises InputError otherwise, with
    one message for missing and outside the roots. The path is confined to the roots in this
    process from now on (``media.confined``): the page's probe and previews open it under them,
    so a link swapped in after this check is refused, not read."""
    path = resolve_video(text)
    confine(path, job_roots())
    stat = path.stat()
    raw = f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    key = "path-" + hashlib.sha256(raw).hexdigest()[:16]
    return ClipSource(path=str(path), name=path.name, key=key, uploaded=False)


def servable(path: str) -> bool:
    """Whether the app may show or serve this file (st.video, frames): a regular video
    file under the media roots or in the uploads folder. A gone file is answered before
    the roots are asked (their "no such file" message reads the folder for close names)."""
    if not os.path.isfile(path):
        return False
    try:
        resolve_video(path)
    except InputError:
        return False
    return True


def browser_playable(path: str) -> bool:
    """Whether st.video is likely to play this container in a browser."""
    return Path(path).suffix.lower() in BROWSER_PLAYABLE


def show_video(path: str, **kwargs: object) -> bool:
    """``st.video`` of a servable clip as opened under the roots now: Streamlit reads the file
    while it is called, so it gets the checked file, never what a link swapped in names.
    False (nothing shown) when the file is not a regular file under the roots any more."""
    import mimetypes

    import streamlit as st

    from chord_core.media.confined import opened

    try:
        with opened(path, job_roots()) as (name, _):
            st.video(name, format=mimetypes.guess_type(path)[0] or "video/mp4",
                     **kwargs)  # type: ignore[arg-type]
    except InputError:
        return False
    return True
