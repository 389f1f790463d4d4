"""Files that requests bring: paths under the media roots, base64 images, uploads.

A path a client sends is read only under the media roots (``chord_core.media.roots``), with
one message whatever lies outside them. Bytes a client sends (base64, data URLs, multipart
uploads) are written under ``<data dir>/uploads/api/`` as private files (0600) named by
their content hash — the same bytes twice make one file — and checked before any job is
queued (images decoded with Pillow, videos probed); a refused file is removed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from chord_core.errors import ChordError, InputError
from chord_core.media.images import IMAGE_EXTENSIONS, image_format, image_info, is_image_path
from chord_core.media.roots import (
    VIDEO_EXTENSIONS,
    configured_roots,
    is_under,
    readable_roots,
    roots_text,
    uploads_root,
)

log = logging.getLogger(__name__)

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,",
                       re.IGNORECASE)
_MEDIA_HINT = ("send a PNG, JPEG, WebP or BMP image or an mp4, avi, mov, mkv or webm video")
CHUNK = 1 << 20


def api_uploads_dir() -> Path:
    """``<data dir>/uploads/api``, created private (0700) with ``uploads/`` (it was 0755:
    ``mkdir(parents=True)`` gives the parents the default mode). Both are Chord's own
    folders, so a looser mode found on them is tightened."""
    root = uploads_root()
    folder = root / "api"
    if not folder.is_dir():
        root.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        root.mkdir(exist_ok=True, mode=0o700)
        folder.mkdir(exist_ok=True, mode=0o700)
    for own in (root, folder):
        if stat.S_IMODE(own.stat().st_mode) & 0o077:
            os.chmod(own, 0o700)
    return folder


def resolve_media(text: str, *, images: bool = True, videos: bool = True) -> Path:
    """The resolved path of a server-side file a client named, checked against the media
    roots: a regular file with an allowed extension. Raises InputError with one message
    whatever the reason (missing, outside, not regular, wrong kind). Nothing is opened."""
    raw = (text or "").strip()
    if raw.lower().startswith("file://"):
        raw = raw[len("file://"):]
    kinds = (IMAGE_EXTENSIONS if images else ()) + (VIDEO_EXTENSIONS if videos else ())
    roots = configured_roots()
    refused = InputError(
        f"{raw[:200]!r} is not a media file under the media roots ({roots_text(roots)})"
        if roots else "paths are switched off on this Chord (CHORD_MEDIA_ROOTS=off)",
        hint="send the file itself (upload, base64 or a data: URL), or a path inside the "
             "media roots (CHORD_MEDIA_ROOTS on the server)")
    if "\x00" in raw:
        raise InputError("the path holds a NUL byte, which no file name can hold",
                         hint="send the path as plain text, without \\u0000")
    if raw.startswith("~"):  # never expanded for a client: ``~user`` would say who exists
        raise InputError(f"{raw[:200]!r}: Chord does not expand another account's home "
                         "folder, nor ~ itself, in a path a client sends",
                         hint="give the full path of a file under the media roots "
                              "(CHORD_MEDIA_ROOTS on the server)")
    if not raw or not roots:
        raise refused
    path = Path(os.path.realpath(raw))
    if not is_under(path, readable_roots()) or path.suffix.lower().lstrip(".") not in kinds:
        raise refused
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise refused
    except OSError:
        raise refused from None
    return path


def decode_base64(text: Any, what: str = "image_data") -> tuple[bytes, str]:
    """Bytes from base64 (plain or a ``data:`` URL) and the URL's MIME type ('' if none).
    Raises InputError when it is not a string, not base64, or empty."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be a base64 string", hint=_MEDIA_HINT + ", base64-encoded")
    mime = ""
    m = _DATA_URL.match(text)
    if m:
        mime, text = (m.group("mime") or "").lower(), text[m.end():]
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InputError(f"{what} is not valid base64",
                         hint="encode the file's bytes with standard base64 (RFC 4648), e.g. "
                              "base64.b64encode(open(path, 'rb').read()).decode()") from None
    if not data:
        raise InputError(f"{what} is empty (0 bytes)", hint=_MEDIA_HINT)
    return data, mime


def _write_private(data_chunks: Any, folder: Path) -> tuple[Path, str, int]:
    """Write chunks to a private temporary file in ``folder``; returns (path, sha256, size)."""
    from chord_core.service.http_errors import FULL_DISK_ERRNOS, disk_full

    digest, size = hashlib.sha256(), 0
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
        with os.fdopen(fd, "wb") as fh:
            for chunk in data_chunks:
                digest.update(chunk)
                size += len(chunk)
                fh.write(chunk)
    except OSError as exc:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        if exc.errno in FULL_DISK_ERRNOS:
            raise disk_full(exc) from None
        raise
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp), digest.hexdigest(), size


def _place(tmp: Path, digest: str, ext: str) -> tuple[Path, bool]:
    """Move a written file to its content name; returns (path, created). Its hash (taken
    while it was written) is remembered, so its content key needs no re-read: for a file
    sent again, before its mtime is renewed, so a request storing the same bytes on
    another thread never sees the new mtime without the hash."""
    from chord_core.media.content_keys import remember_hash

    final = tmp.parent / f"{digest[:32]}.{ext}"
    if final.exists():
        tmp.unlink(missing_ok=True)
        now = time.time_ns()
        remember_hash(final, digest, now)
        os.utime(final, ns=(now, now))  # sent again: its retention starts over (retention.py)
        return final, False
    os.replace(tmp, final)
    remember_hash(final, digest)
    return final, True


def image_ext(data: bytes) -> str:
    """The extension of an image by its content: the one format policy of
    ``media.images`` (the same bytes are accepted or refused on every route)."""
    return image_format(data)


def save_image_bytes(data: bytes) -> Path:
    """Store image bytes as a private, content-named file and check that it decodes."""
    return save_image_probed(data)[0]


def save_image_probed(data: bytes, *, folder: Path | None = None,
                      decode: bool = True) -> tuple[Path, Any]:
    """``save_image_bytes``, also returning the image's ``VideoInfo`` from that check (a job
    given it is not probed again by the manager). ``folder``: the API's uploads folder when
    the caller has it already; ``decode=False`` checks the format and header only (size,
    orientation) — for a job whose worker decodes the image anyway and fails it alone with
    the same error when it does not decode (``/batch_predict``: one decode a task, not two)."""
    if not data:
        raise InputError("the image is empty (0 bytes)", hint=_MEDIA_HINT)
    ext = image_ext(data)
    tmp, digest, _ = _write_private([data], folder or api_uploads_dir())
    path, created = _place(tmp, digest, ext)
    return _probed(path, created, decode)


def save_media_bytes(data: bytes, mime: str = "", name: str = "") -> Path:
    """Store an image or a video (by MIME type, else file name, else by sniffing)."""
    ext = Path(name).suffix.lower().lstrip(".")
    if mime.startswith("image/") or ext in IMAGE_EXTENSIONS or (not mime and not ext):
        return save_image_bytes(data)
    if mime.startswith("video/") and ext not in VIDEO_EXTENSIONS:
        ext = {"video/quicktime": "mov", "video/x-matroska": "mkv", "video/webm": "webm",
               "video/x-msvideo": "avi"}.get(mime, "mp4")
    if ext not in VIDEO_EXTENSIONS:
        raise InputError(f"unsupported media type {mime or ext!r}", hint=_MEDIA_HINT)
    tmp, digest, _ = _write_private([data], api_uploads_dir())
    path, created = _place(tmp, digest, ext)
    return _checked(path, created)


def save_stream(chunks: Any, name: str) -> Path:
    """Store an uploaded file (an iterator of byte chunks) by its name's extension."""
    ext = Path(name or "").suffix.lower().lstrip(".")
    if ext not in VIDEO_EXTENSIONS + IMAGE_EXTENSIONS:
        raise InputError(f"the upload {Path(name or '?').name!r} has no supported extension",
                         hint=_MEDIA_HINT)
    tmp, digest, size = _write_private(chunks, api_uploads_dir())
    if size == 0:
        tmp.unlink(missing_ok=True)
        raise InputError("the uploaded file is empty (0 bytes)", hint=_MEDIA_HINT)
    path, created = _place(tmp, digest, "jpg" if ext == "jpeg" else ext)
    return _checked(path, created)


def _checked(path: Path, created: bool) -> Path:
    """Probe the stored file (image decode or video probe); remove it when refused."""
    return _probed(path, created)[0]


def _probed(path: Path, created: bool, decode: bool = True) -> tuple[Path, Any]:
    from chord_core.analysis.request import probe_input

    os.chmod(path, 0o600)
    try:
        info = probe_input(path, decode_images=decode)
    except ChordError:
        if created:
            path.unlink(missing_ok=True)
        raise
    return path, info


def media_from_url(url: Any, *, kind: str) -> Path:
    """A chat ``image_url``/``video_url``: a data URL (stored) or a server path / file://
    URL under the media roots. Remote URLs are refused: nothing is fetched."""
    if isinstance(url, Mapping):
        url = url.get("url")
    if not isinstance(url, str) or not url.strip():
        raise InputError(f"{kind} needs a url", hint='e.g. {"url": "data:image/png;base64,…"}')
    if url.startswith("data:"):
        data, mime = decode_base64(url, kind)
        return save_media_bytes(data, mime)
    if re.match(r"^[a-z][a-z0-9+.-]*://", url, re.IGNORECASE) and not \
            url.lower().startswith("file://"):
        raise InputError(f"{kind}: this server does not fetch remote URLs",
                         hint="nothing leaves this machine: send a data: URL (base64) or the "
                              "path of a file under the server's media roots")
    return resolve_media(url, images=True, videos=True)
