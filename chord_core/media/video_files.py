"""Which files count as video, decided before any decoder touches them.

FFmpeg opens far more than video: a text file named ``.asc``/``.nfo``/``.ans`` becomes "ANSI
video" (its ``tty`` pseudo-demuxer renders the text), a single PNG or JPEG becomes a one-frame
clip (``image2`` / ``*_pipe`` demuxers), and opening a named pipe or ``/dev/zero`` blocks or
reads forever. :func:`check_video_file` refuses all of these with a clear message and hint:

1. ``os.stat`` first — missing, symlink loops, unreadable, folders, and anything that is not a
   regular file (FIFO, character/block device, socket) are refused without opening them;
2. empty files; then the first bytes: image signatures, and plain text;
3. :func:`check_container` (PyAV, when installed): the demuxer FFmpeg picks must not be a
   pseudo-demuxer, and the file must hold a real video stream (not audio only, not just cover
   art). Without PyAV the pseudo-demuxers' file extensions are refused instead.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from pathlib import Path

from chord_core.errors import VideoError
from chord_core.media.confined import source

__all__ = ["TTY_SUFFIXES", "check_container", "check_regular_file", "check_video_file"]

log = logging.getLogger(__name__)

HEAD_BYTES = 512
# Extensions FFmpeg's tty demuxer claims (libavformat/tty.c).
TTY_SUFFIXES = frozenset({".ans", ".art", ".asc", ".diz", ".ice", ".nfo", ".txt", ".vt"})
# Demuxers that turn non-video into frames.
PSEUDO_DEMUXERS = frozenset({"tty", "image2", "image2pipe", "lavfi", "bin", "xbin", "adf",
                             "idf"})
IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"), (b"GIF89a", "a GIF image"), (b"BM", "a BMP image"),
    (b"II*\x00", "a TIFF image"), (b"MM\x00*", "a TIFF image"), (b"%PDF", "a PDF document"),
)
_PICK_VIDEO = "pick a video file (MP4, MOV, MKV, WebM, AVI)"


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stat(p: Path) -> os.stat_result:
    try:
        with source(p) as src:
            return os.stat(src)
    except FileNotFoundError:
        dangling = p.is_symlink()
        raise VideoError(f"video file not found: {p}" + (" (a symbolic link to a missing "
                                                         "file)" if dangling else ""),
                         hint="check the path and file name (and that the file was not "
                              "moved)") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise VideoError(f"{p.name} is a symbolic link loop (it points back to itself)",
                             hint="point the link at the real video file") from None
        if exc.errno == errno.EACCES:
            raise VideoError(f"cannot read {p.name}: permission denied",
                             hint="check the file's permissions") from None
        raise VideoError(f"cannot read {p.name}: {exc.strerror or exc}",
                         hint="check the path") from None


def _head(p: Path) -> bytes:
    try:
        with source(p) as src, open(src, "rb") as f:
            return f.read(HEAD_BYTES)
    except PermissionError:
        raise VideoError(f"cannot read {p.name}: permission denied",
                         hint="check the file's permissions") from None
    except OSError as exc:
        raise VideoError(f"cannot read {p.name}: {exc.strerror or exc}",
                         hint="check that the disk or share is still there") from None


def looks_like_text(head: bytes) -> bool:
    """UTF-8 text (ASCII included) without control characters other than tabs, line breaks
    and escapes: a video container always has binary bytes within its first few hundred."""
    text = head.decode("utf-8", errors="ignore")
    if not head or len(text.encode("utf-8")) < len(head) - 3:  # only a cut last character
        return False
    return all(c in "\t\n\r\f\x1b" or c.isprintable() for c in text)


def check_regular_file(path: str | Path) -> os.stat_result:
    """``os.stat`` of an existing regular file (never opened); else :class:`VideoError`."""
    p = Path(path)
    st = _stat(p)
    if stat.S_ISDIR(st.st_mode):
        raise VideoError(f"{p.name or p} is a folder, not a video file",
                         hint="pass the path of a video file such as clip.mp4")
    if not stat.S_ISREG(st.st_mode):
        raise VideoError(f"{p.name} is {_kind_of(st.st_mode)}, not a video file",
                         hint="pass a regular video file; pipes and devices are never read")
    return st


def check_video_file(path: str | Path) -> Path:
    """The path, if it may be a video file; else :class:`VideoError` saying what it is."""
    p = Path(path)
    st = check_regular_file(p)
    if st.st_size == 0:
        raise VideoError(f"video file {p.name} is empty (0 bytes)",
                         hint="the upload or copy probably failed; copy the file again")
    head = _head(p)
    for signature, what in IMAGE_SIGNATURES:
        if head.startswith(signature):
            raise VideoError(f"{p.name} is {what}, not a video", hint=_PICK_VIDEO)
    if looks_like_text(head):
        raise VideoError(f"{p.name} is a text file, not a video", hint=_PICK_VIDEO)
    return p


def check_container(p: Path) -> None:
    """Refuse files FFmpeg opens through a pseudo-demuxer or that hold no video stream."""
    try:
        import av
    except ImportError:
        if p.suffix.lower() in TTY_SUFFIXES:
            raise VideoError(f"{p.name} is a text file ({p.suffix} files are shown as text, "
                             "not video)", hint=_PICK_VIDEO) from None
        return
    try:
        with source(p) as src, av.open(src) as container:
            fmt = container.format.name
            streams = [s for s in container.streams.video
                       if not s.disposition & av.stream.Disposition.attached_pic]
            audio = bool(container.streams.audio)
    except (av.error.FFmpegError, OSError) as exc:
        log.info("%s: PyAV cannot open it (%s); OpenCV will judge", p.name, exc)
        return
    names = set(fmt.split(","))
    if names & PSEUDO_DEMUXERS or any(n.endswith("_pipe") for n in names):
        what = "a text file" if names & {"tty", "bin", "xbin", "adf", "idf"} else "an image"
        raise VideoError(f"{p.name} is {what}, not a video (FFmpeg would only render it as "
                         "one)", hint=_PICK_VIDEO)
    if not streams:
        raise VideoError(f"{p.name} has no video stream" + (" (audio only)" if audio else ""),
                         hint=_PICK_VIDEO)
