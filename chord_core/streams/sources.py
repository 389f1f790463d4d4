"""What a live source is, and how it is shown: never with its credentials.

A source is ``rtsp://…``, ``rtsps://…``, an HLS playlist (``http(s)://….m3u8``) or a local
capture device (``/dev/video0``). Cameras put a user and password in the URL
(``rtsp://admin:secret@cam.local/stream1``); Chord keeps the full URL in memory only, to
connect, and everything it logs, stores, returns or shows carries the **masked** form
(``rtsp://***@cam.local/stream1``). ``mask_text`` scrubs an error message too: FFmpeg's
messages quote the URL they failed on, credentials and all.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

from chord_core.errors import InputError

SCHEMES = ("rtsp", "rtsps", "http", "https")
MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]*@")


def is_stream(text: str) -> bool:
    """True when ``text`` names a live source rather than a folder (see the docstring)."""
    text = text.strip()
    low = text.lower()
    if low.startswith(("rtsp://", "rtsps://")):
        return True
    if low.startswith(("http://", "https://")):
        return urlsplit(text).path.lower().endswith(".m3u8")
    return bool(re.fullmatch(r"/dev/video\d+", text))


def mask_url(url: str) -> str:
    """``url`` with its user and password replaced by ``***``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"{MASK}@{host}", parts.path, parts.query, ""))


def mask_text(text: str, url: str = "") -> str:
    """``text`` with every URL's credentials masked, and ``url``'s password (also
    decoded, as FFmpeg may quote it) removed wherever it appears."""
    out = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", str(text))
    if url:
        parts = urlsplit(url)
        for secret in (parts.password,):
            for form in {secret, unquote(secret or "")}:
                if form and len(form) >= 3:
                    out = out.replace(form, MASK)
    return out


@dataclass(frozen=True)
class StreamSource:
    """A checked live source. ``url`` holds the credentials: read it to connect, never to
    show; ``shown`` is what the logs, the store and the user see."""

    url: str
    kind: str  # "rtsp", "rtsps", "hls" or "device"

    @property
    def shown(self) -> str:
        return mask_url(self.url)

    @property
    def stream_id(self) -> str:
        """A short id from the masked URL: the same camera is the same stream, whatever
        password it is opened with."""
        return "live-" + hashlib.sha1(self.shown.encode()).hexdigest()[:10]

    def __repr__(self) -> str:  # never print the credentials by accident
        return f"StreamSource({self.shown!r}, {self.kind!r})"

    __str__ = __repr__


def parse_source(text: str) -> StreamSource:
    """Check a source the user typed (see the module docstring); a clear error otherwise."""
    text = (text or "").strip()
    if len(text) > 2048:
        raise InputError("the stream address is longer than 2,048 characters",
                         hint="give the camera's RTSP or HLS address")
    if re.fullmatch(r"/dev/video\d+", text):
        if not os.path.exists(text):
            raise InputError(f"no capture device {text}",
                             hint="plug the camera in, or list them with `ls /dev/video*`")
        return StreamSource(text, "device")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    shown = mask_text(text)
    if scheme not in SCHEMES or not parts.hostname:
        raise InputError(f"{shown!r} is not a stream Chord can watch",
                         hint="use rtsp://HOST/PATH, rtsps://…, http(s)://…/PLAYLIST.m3u8 "
                              "or a capture device like /dev/video0")
    if scheme in ("http", "https") and not parts.path.lower().endswith(".m3u8"):
        raise InputError(f"{shown!r} is not an HLS playlist",
                         hint="an http(s) stream must be an HLS playlist ending in .m3u8")
    try:
        parts.port  # noqa: B018 — raises on a port that is not a number
    except ValueError:
        raise InputError(f"{shown!r} has a port that is not a number",
                         hint="write the port as a number, e.g. rtsp://cam.local:554/") from None
    kind = "hls" if scheme in ("http", "https") else scheme
    return StreamSource(text, kind)


__all__ = ["StreamSource", "parse_source", "is_stream", "mask_url", "mask_text"]
