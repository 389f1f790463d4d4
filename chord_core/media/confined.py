"""Open what was checked: a job's media file is opened under its media roots, at open time.

The service and the app check a typed path against the media roots when a job is submitted
(``roots.resolve_video``, ``service.media.resolve_media``), but a worker opens the file later.
Measured (issue 25): with the worker busy, ``media/swap.mp4`` was submitted (202), then
replaced by a symlink to a file outside the roots; the job described the outside file. So a
request that names its roots (``AnalysisRequest.media_roots``) *confines* its path in every
process it reaches (:func:`confine`), and every open site in the readers asks
:func:`source` for the name to open:

- an unconfined path (the CLI, which reads any file its user can) comes back unchanged;
- a confined one is opened component by component from its root with ``O_NOFOLLOW``
  (``openat`` through ``dir_fd``), so a symlink or a moved folder anywhere below the root is
  refused rather than followed; the final descriptor must be a regular file (``fstat``; a
  FIFO or a device is never opened for reading: the name is ``lstat``-ed first and opened
  ``O_NONBLOCK``) whose ``/proc/self/fd`` link still lies under a root. The reader (PyAV,
  OpenCV, Pillow, ``open``) is handed ``/proc/self/fd/N``: opening that reopens the checked
  inode, whatever the name points at by then, so what is read is what was checked.

Every refusal is one message that does not say whether the file exists (no oracle).
Paths are confined per process, by name, and never released: a name once confined stays
confined for any later request in that process (stricter, never looser).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator, Sequence

from chord_core.errors import InputError

log = logging.getLogger(__name__)

MAX_CONFINED = 200_000  # names remembered per process (~40 MB at most); the oldest go first
_PROC_FD = "/proc/self/fd"
_LOCK = threading.Lock()
_CONFINED: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_WALKS = hasattr(os, "O_NOFOLLOW") and os.open in os.supports_dir_fd


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def confine(path: str | os.PathLike[str], roots: Sequence[str]) -> None:
    """From now on, this process opens ``path`` only under ``roots`` (resolved folders)."""
    key, new = _key(path), tuple(os.fspath(r) for r in roots)
    with _LOCK:
        old = _CONFINED.pop(key, None)
        # Two requests for one name with different roots: only a folder in both may serve it.
        _CONFINED[key] = new if old is None else tuple(r for r in old if r in new)
        while len(_CONFINED) > MAX_CONFINED:
            _CONFINED.popitem(last=False)


def roots_for(path: str | os.PathLike[str]) -> tuple[str, ...] | None:
    """The roots ``path`` is confined to in this process, or None when it is not."""
    with _LOCK:
        return _CONFINED.get(_key(path))


def refused(path: str | os.PathLike[str], roots: Sequence[str]) -> InputError:
    """The one open-time refusal: missing, swapped for a link, moved, not regular, outside."""
    text = os.fspath(path)
    shown = text if len(text) <= 200 else text[:200] + "…"
    return InputError(f"{shown} is not a file under the media roots "
                      f"({', '.join(roots) or 'none'})",
                      hint="it must stay a regular file inside one of these folders until the "
                           "job has read it (not a link to a file elsewhere); put the file "
                           "there again, or upload it")


@contextmanager
def source(path: str | os.PathLike[str]) -> Iterator[str]:
    """The name a reader should open for ``path``: the path itself when it is not confined,
    else ``/proc/self/fd/N`` of a descriptor opened under its roots (:func:`open_under`),
    valid inside the ``with`` block. Raises InputError (:func:`refused`) for a confined path
    that is not (or no longer) a regular file under its roots."""
    roots = roots_for(path)
    if roots is None:
        yield os.fspath(path)
        return
    if not _WALKS or not os.path.isdir(_PROC_FD):  # not Linux: the check, then the name
        yield _checked_name(path, roots)
        return
    fd = open_under(path, roots)
    try:
        yield f"{_PROC_FD}/{fd}"
    finally:
        os.close(fd)


@contextmanager
def opened(path: str | os.PathLike[str],
           roots: Sequence[str]) -> Iterator[tuple[str, os.stat_result]]:
    """``path`` opened under ``roots`` now, whether or not it was confined: (the name a reader
    opens, the opened file's ``fstat``), valid inside the ``with`` block. For reads that are
    not a job's (a thumbnail, a preview, a poster): the file the store or a page names may
    have been swapped since it was analysed. Raises InputError (:func:`refused`)."""
    roots = tuple(os.fspath(r) for r in roots)
    if not _WALKS or not os.path.isdir(_PROC_FD):
        name = _checked_name(path, roots)
        yield name, os.stat(name)
        return
    fd = open_under(path, roots)
    try:
        yield f"{_PROC_FD}/{fd}", os.fstat(fd)
    finally:
        os.close(fd)


def _checked_name(path: str | os.PathLike[str], roots: Sequence[str]) -> str:
    real = os.path.realpath(path)
    if not _inside(real, roots) or not os.path.isfile(real):
        raise refused(path, roots)
    return real


def _inside(path: str, roots: Sequence[str]) -> bool:
    return any(path != r and os.path.commonpath([path, r]) == r for r in roots)


def _split_under(path: str, roots: Sequence[str]) -> tuple[str, list[str]] | None:
    """(root, components below it) for the deepest root that contains ``path`` by name."""
    for root in sorted(roots, key=len, reverse=True):
        if os.path.isabs(root) and _inside(path, [root]):
            parts = os.path.relpath(path, root).split(os.sep)
            if parts and all(p not in ("", ".", "..") for p in parts):
                return root, parts
    return None


def open_under(path: str | os.PathLike[str], roots: Sequence[str]) -> int:
    """A read-only descriptor of the regular file ``path`` names, reached from a root without
    following any symlink below it; the caller closes it. Raises InputError (:func:`refused`)."""
    split = _split_under(_key(path), roots)
    if split is None:
        raise refused(path, roots)
    root, parts = split
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        dfd = os.open(root, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    except OSError:
        raise refused(path, roots) from None
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | os.O_DIRECTORY, dir_fd=dfd)
            os.close(dfd)
            dfd = nxt
        named = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        if not stat.S_ISREG(named.st_mode):
            raise refused(path, roots)
        fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=dfd)
    except OSError:
        raise refused(path, roots) from None
    finally:
        os.close(dfd)
    return _verified(fd, named, path, roots)


def _verified(fd: int, named: os.stat_result, path: str | os.PathLike[str],
              roots: Sequence[str]) -> int:
    """``fd`` when it is the regular file that was ``lstat``-ed and still lies under a root."""
    try:
        st = os.fstat(fd)
        where = os.readlink(f"{_PROC_FD}/{fd}") if os.path.isdir(_PROC_FD) else _key(path)
    except OSError:
        where, st = "", named
    if (not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (named.st_dev, named.st_ino)
            or not _inside(where, roots)):
        os.close(fd)
        log.warning("refused %s at open time: not the checked file under the media roots",
                    os.fspath(path)[:200])
        raise refused(path, roots)
    return fd
