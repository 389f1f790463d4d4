"""Which files a path typed in the browser may reach: the configured media roots.

The app runs on the user's machine but is one URL away from every browser on it, so a path
typed into the Analyze path box or the Batch folder box is read only when, after symlinks and
``..`` are resolved, it lies under a media root (or the uploads folder of the data dir), is a
regular file (not a FIFO or a device) and has a video extension. Everything refused outside
the roots gets one message that does not say whether the file exists, so the boxes cannot be
used to explore the machine. Inside a root (which the user may read anyway) a missing file
says so — "no such file in <root>" — with the close names in its folder (difflib), since a
typo is the usual reason.

``CHORD_MEDIA_ROOTS`` lists the roots, separated by ``os.pathsep`` or commas. Unset or empty:
``<data dir>/media`` plus ``~/Videos`` when that folder exists. ``off`` (or ``none``): no
path may be typed at all; uploads still work. Read at call time, never at import.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from chord_core.config import default_data_dir, env_value
from chord_core.errors import InputError

log = logging.getLogger(__name__)

ENV = "CHORD_MEDIA_ROOTS"
OFF_VALUES = frozenset({"off", "none", "0", "false", "no"})
VIDEO_EXTENSIONS = ("mp4", "avi", "mov", "mkv", "webm")
MAX_LISTED = 1000
MAX_DEPTH = 8
MAX_ENTRIES_SEEN = 50_000
MAX_WALK_S = 10.0
MAX_CLOSE_SCAN = 5000  # entries of a folder looked at for close names (bounded)
MAX_CLOSE_NAMES = 3


@dataclass(frozen=True)
class FolderListing:
    """Videos found in a folder; ``truncated`` says a bound (count, depth, time) stopped it."""

    paths: list[Path]
    truncated: bool = False


def uploads_root(data_dir: Path | None = None) -> Path:
    """Where uploaded clips are saved (always readable: Chord wrote them itself)."""
    return (data_dir or default_data_dir()) / "uploads"


def configured_roots(env: Mapping[str, str] | None = None,
                     data_dir: Path | None = None) -> list[Path]:
    """The media roots, resolved (``realpath``); empty when typed paths are switched off."""
    raw = env_value(ENV, env)
    if raw.lower() in OFF_VALUES:
        return []
    if raw:
        items = [p.strip() for p in re.split(rf"[,{re.escape(os.pathsep)}]", raw) if p.strip()]
    else:
        items = [str((data_dir or default_data_dir()) / "media")]
        videos = Path.home() / "Videos"
        if videos.is_dir():
            items.append(str(videos))
    return list(dict.fromkeys(Path(os.path.realpath(Path(p).expanduser())) for p in items))


def streams_root(data_dir: Path | None = None) -> Path:
    """Where live streams are recorded (always readable: Chord wrote them itself)."""
    return (data_dir or default_data_dir()) / "streams"


def readable_roots(env: Mapping[str, str] | None = None,
                   data_dir: Path | None = None) -> list[Path]:
    """The media roots plus the uploads folder and the live streams' recordings."""
    uploads = Path(os.path.realpath(uploads_root(data_dir)))
    streams = Path(os.path.realpath(streams_root(data_dir)))
    return list(dict.fromkeys([*configured_roots(env, data_dir), uploads, streams]))


def roots_text(roots: list[Path] | None = None) -> str:
    """The roots as users see them in messages, e.g. ``/data/media, /home/me/Videos``."""
    roots = configured_roots() if roots is None else roots
    return ", ".join(str(r) for r in roots) if roots else "none: typed paths are off"


def is_under(path: Path, roots: list[Path]) -> bool:
    """Whether the already-resolved ``path`` is one of ``roots`` or lies inside one."""
    return any(path == r or path.is_relative_to(r) for r in roots)


def is_video_name(path: str | Path) -> bool:
    """Whether the name ends in a video extension (``clip.d.ts`` and ``key.asc`` do not)."""
    return Path(path).suffix.lower().lstrip(".") in VIDEO_EXTENSIONS


def _clean(text: str) -> str:
    return text.strip().strip('"').strip("'").strip()


def typed_path(text: str) -> Path:
    """A path typed by a user or sent by a client, as a Path, not yet resolved.

    Refused with a clear InputError (the same for every caller: the app's boxes, the service's
    fields): a NUL byte (``os.stat`` would raise ValueError: a crash in the app, a 500 in the
    service) and ``~name`` (expanding it looks the account up: ``~nosuchuser`` crashed where
    ``~root`` was refused, which told which accounts exist). ``~`` and ``~/…`` (this user's
    own home, no lookup of anyone) are expanded."""
    if "\x00" in text:
        raise InputError("the path contains a NUL byte (\\0), which no file name can hold",
                         hint="type or paste the path again without control characters")
    if text.startswith("~") and not (text == "~" or text.startswith("~/")):
        name = text[1:].split("/", 1)[0][:64]
        raise InputError(f"~{name}: Chord does not expand another account's home folder",
                         hint="give the full path (e.g. /home/name/Videos/clip.mp4), or ~/… "
                              "for the home folder of the account Chord runs as")
    return Path(text).expanduser() if text.startswith("~") else Path(text)


def job_roots(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The folders a job of the app or the service may read, for ``AnalysisRequest.
    media_roots``: the worker opens the file under them again (``media.confined``)."""
    return tuple(str(r) for r in readable_roots(env))


def _refused(text: str, roots: list[Path]) -> InputError:
    """One message for missing, outside the roots, not regular, and not a video name."""
    shown = text if len(text) <= 200 else text[:200] + "…"
    if not roots:
        return InputError("typing a path is switched off on this Chord (CHORD_MEDIA_ROOTS=off)",
                          hint="upload the clip instead, or start Chord with CHORD_MEDIA_ROOTS "
                               "set to the folders it may read")
    return InputError(f"{shown} is not a video file under the media roots "
                      f"({roots_text(roots)})",
                      hint="give the path of an mp4, avi, mov, mkv or webm file inside one of "
                           "these folders, upload the clip, or set CHORD_MEDIA_ROOTS to the "
                           "folders Chord may read")


def close_names(path: Path, limit: int = MAX_CLOSE_NAMES) -> list[str]:
    """Video file names in ``path``'s folder close to its name (difflib), best first; the
    folder is read once and only its first MAX_CLOSE_SCAN entries are looked at."""
    names: list[str] = []
    try:
        with os.scandir(path.parent) as it:
            for n, entry in enumerate(it):
                if n >= MAX_CLOSE_SCAN:
                    break
                if is_video_name(entry.name):
                    names.append(entry.name)
    except OSError:
        return []
    return difflib.get_close_matches(path.name, names, n=limit, cutoff=0.6)


def _missing(path: Path, roots: list[Path]) -> InputError | None:
    """A missing video file inside a configured root (resolved ``path``): say so, with close
    names. None outside the roots (the uploads folder too): the one refusal is kept there."""
    root = next((r for r in roots if is_under(path, [r])), None)
    if root is None:
        return None
    rel = str(path.relative_to(root))
    rel = rel if len(rel) <= 200 else rel[:200] + "…"
    if not path.parent.is_dir():
        return InputError(f"no such file in {root}: {rel} (its folder does not exist)",
                          hint="check the folder names in the path, or upload the clip")
    close = close_names(path)
    if close:
        return InputError(f"no such file in {root}: {rel}",
                          hint=f"did you mean {' or '.join(close)}? (in "
                               f"{path.parent})")
    return InputError(f"no such file in {root}: {rel}",
                      hint=f"check the file name; no video in {path.parent} has a name "
                           "close to it")


def resolve_video(text: str, env: Mapping[str, str] | None = None) -> Path:
    """The resolved path of a typed video file, checked against the roots.

    Raises InputError (one message whatever the reason) unless the resolved path lies under a
    root, has a video extension and is a regular file. Nothing is opened, only ``stat``-ed."""
    raw = _clean(text)
    roots = configured_roots(env)
    if not raw:
        raise _refused(raw, roots)
    path = Path(os.path.realpath(typed_path(raw)))
    if not is_under(path, readable_roots(env)) or not is_video_name(path):
        raise _refused(raw, roots)
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise _missing(path, roots) or _refused(raw, roots) from None
    except OSError:
        raise _refused(raw, roots) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{raw} is a folder, not a video file",
                         hint="give the full path of one video file (the Batch page takes "
                              "folders)")
    if not stat.S_ISREG(st.st_mode):
        raise _refused(raw, roots)
    return path


def check_regular_video(path: str | Path, env: Mapping[str, str] | None = None) -> Path:
    """Re-check a path chosen earlier (just before it is hashed or queued): still a regular
    video file under the roots. Raises the same InputError as ``resolve_video``."""
    return resolve_video(str(path), env)


def resolve_folder(text: str, env: Mapping[str, str] | None = None) -> Path:
    """The resolved folder under the roots (or one video file, see ``list_videos``)."""
    raw = _clean(text)
    roots = configured_roots(env)
    path = Path(os.path.realpath(typed_path(raw))) if raw else Path()
    if not raw or not roots or not is_under(path, roots) or not path.is_dir():
        raise InputError(f"{raw[:200]} is not a folder under the media roots "
                         f"({roots_text(roots)})" if roots else
                         "typing a path is switched off on this Chord (CHORD_MEDIA_ROOTS=off)",
                         hint="give a folder inside one of the media roots, upload the clips, "
                              "or set CHORD_MEDIA_ROOTS to the folders Chord may read")
    return path


def list_videos(text: str, env: Mapping[str, str] | None = None, limit: int = MAX_LISTED,
                max_depth: int = MAX_DEPTH, max_seconds: float = MAX_WALK_S) -> FolderListing:
    """Video files in a folder under the roots (or one typed video file), sorted.

    Bounded: at most ``limit`` files, ``max_depth`` folder levels, ``MAX_ENTRIES_SEEN``
    entries and ``max_seconds``; entries that vanish or cannot be read are skipped; symlinks
    count only when their target is a regular video file under the roots."""
    raw = _clean(text)
    if raw and is_video_name(raw):
        return FolderListing([resolve_video(raw, env)])
    folder = resolve_folder(raw, env)
    roots = configured_roots(env)
    found: list[Path] = []
    truncated = False
    deadline = time.monotonic() + max_seconds
    for n, entry in enumerate(_walk(folder, max_depth)):
        if entry is None or n >= MAX_ENTRIES_SEEN or time.monotonic() > deadline:
            truncated = True
            break
        video = _video_entry(entry, roots)
        if video is not None:
            found.append(video)
            if len(found) >= limit:
                truncated = True
                break
    found = sorted(dict.fromkeys(found))
    if not found:
        raise InputError(f"no video files in {raw[:200]}",
                         hint=f"Chord looks for {', '.join(VIDEO_EXTENSIONS)} files, "
                              f"{max_depth} folder levels deep")
    return FolderListing(found, truncated)


def _walk(folder: Path, max_depth: int) -> Iterator[os.DirEntry[str] | None]:
    """Entries under ``folder``, breadth first, without following directory symlinks.
    Yields None once when a folder deeper than ``max_depth`` was skipped."""
    level = [folder]
    for depth in range(max_depth + 1):
        nxt: list[Path] = []
        for current in level:
            try:
                with os.scandir(current) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue  # vanished or unreadable: skip it
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    nxt.append(Path(entry.path))
                else:
                    yield entry
        if not nxt:
            return
        if depth == max_depth:
            yield None
            return
        level = nxt


def _video_entry(entry: os.DirEntry[str], roots: list[Path]) -> Path | None:
    """The resolved path when ``entry`` is a regular video file under the roots."""
    if not is_video_name(entry.name):
        return None
    path = Path(os.path.realpath(entry.path))
    if not is_video_name(path) or not is_under(path, roots):
        return None
    try:
        return path if stat.S_ISREG(os.stat(path).st_mode) else None
    except OSError:
        return None
