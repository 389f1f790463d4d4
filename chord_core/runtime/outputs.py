"""Output files: checked before an analysis starts, written whole or not at all, and never the
reason a finished result is lost.

* ``check_file`` / ``check_folder`` prove an output can be written by creating (and removing) a
  file next to it — ``os.access`` says yes to root on read-only mounts — and raise
  ``OutputError`` (exit 2) before any model is loaded.
* ``write_atomic`` writes a temporary file in the same folder, syncs it and renames it over
  the target: a reader sees the old file or the new one, never half of one.
* ``keep_result`` is the fallback when writing fails after the work is done (disk full):
  the result goes into the job store, and the error says where it is and how to get it out
  (``python -m chord_core export JOB_ID --json OUT``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from chord_core.errors import ChordError, OutputError

log = logging.getLogger(__name__)

_HINTS = {
    errno.ENOSPC: "the disk is full: free space on it or choose a folder on another disk",
    errno.EDQUOT: "your disk quota is used up: free space or choose another folder",
    errno.EROFS: "that disk is read-only: choose a folder on a writable disk",
    errno.EACCES: "you may not write there: choose another folder or fix its permissions",
    errno.EPERM: "you may not write there: choose another folder or fix its permissions",
    errno.ENOTDIR: "part of that path is a file, not a folder: choose another path",
    errno.ENOENT: "that folder does not exist and cannot be created: choose another path",
}


def hint_for(exc: OSError) -> str:
    """What to do about an OSError met while writing an output."""
    return _HINTS.get(exc.errno or 0, "choose another output path")


def check_folder(folder: str | Path, what: str) -> Path:
    """Make ``folder`` if needed and prove a file can be created in it; OutputError if not."""
    path = Path(folder).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".chord-write-check-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write {what} in {path}: {exc.strerror or exc}",
                          hint=hint_for(exc)) from None
    return path


def check_file(target: str | Path | None, what: str) -> Path | None:
    """Check an output file path before the work starts (None: no such output asked for)."""
    if not target:
        return None
    path = Path(target).expanduser()
    if path.is_dir():
        raise OutputError(f"{what} {path} is a folder",
                          hint=f"give a file name, e.g. {path / 'out.json'}")
    check_folder(path.parent, what)
    return path


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a synced temporary file and a rename. Raises
    OSError (the temporary file is removed); the target is then unchanged."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, doc: Any) -> None:
    write_atomic(path, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def write_annotated_video(result: Any, target: str | Path, on_progress: Any = None, *,
                          saved_as: str = "") -> None:
    """Render the annotated MP4 after the result itself was saved; a write failure (disk
    full) becomes an OutputError that says the result is safe (``saved_as``)."""
    import time

    from chord_core.analysis.render import export_annotated_video
    from chord_core.types import ProgressEvent

    t0 = time.perf_counter()

    def progress(done: int, total: int) -> None:
        if on_progress is not None:
            on_progress(ProgressEvent("rendering", f"frame {done}/{total}", done, total,
                                      time.perf_counter() - t0))

    try:
        export_annotated_video(result.video.path, result, target, on_progress=progress)
    except OSError as exc:
        raise OutputError(f"could not write the annotated video {target}: "
                          f"{exc.strerror or exc}",
                          hint=f"{hint_for(exc)}; the result itself is in {saved_as}") from None
    if on_progress is not None:
        on_progress(ProgressEvent("done", "annotated video written", 1, 1,
                                  time.perf_counter() - t0))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def keep_result(doc: dict[str, Any], target: str | Path, exc: OSError, *,
                model: str = "", stored: tuple[str, Path] | None = None) -> OutputError:
    """After ``target`` could not be written: keep ``doc`` (a chord.result/v1) in the job
    store and return the error that says where it is. If the store cannot take it either
    (same full disk), the JSON goes to stdout as the last place left. ``stored``: (job id,
    store path) of a job that already holds it (a CLI run kept as a job): only said."""
    from chord_core.runtime.store import Store

    what = f"could not write {target}: {exc.strerror or exc}"
    if stored is not None:
        job_id, where = stored
        return OutputError(f"{what}; the result is kept in the job store {where} as job "
                           f"{job_id}", hint=f"{hint_for(exc)}; then: python -m chord_core "
                                             f"export {job_id} --json {target}")
    job_id = f"cli-{uuid.uuid4().hex[:12]}"
    try:
        with Store() as store:
            video = doc.get("video") or {}
            store.add_job(job_id, video_path=str(video.get("path", "")),
                          task=str(doc.get("task", "")), query=str(doc.get("query", "")),
                          model=model or str((doc.get("model") or {}).get("id", "")))
            store.save_result(job_id, doc)
            where = store.path
    except (ChordError, OSError) as store_exc:
        log.warning("the job store could not keep the result either: %s", store_exc)
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return OutputError(f"{what}; the job store could not keep it either, so the result "
                           f"was printed on stdout", hint=hint_for(exc))
    return OutputError(f"{what}; the result is kept in the job store {where} as job {job_id}",
                       hint=f"{hint_for(exc)}; then: python -m chord_core export {job_id} "
                            f"--json {target}")
