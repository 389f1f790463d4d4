"""Chord's exception tree: every error a user can hit says what failed and how to fix it.

    ChordError                      base; ``hint`` says what to do about it
    ├── InputError                  the user's input is wrong (CLI exit code 2)
    │   ├── VideoError              not a video, empty, unreadable, truncated, missing
    │   ├── ConfigError             an option or config value out of range / malformed
    │   ├── OutputError             an output file or folder cannot be written (exit 2)
    │   └── ModelNotFoundError      weights missing locally and the hub unreachable
    ├── ModelError                  the model could not be loaded or placed (exit 1)
    │   └── PlacementError          weights would silently land on CPU/disk while GPUs exist
    ├── ResourceError               out of memory even after every degradation step
    │   └── OutOfMemory             out of GPU memory at batch size 1 (the engine lowers
    │                               pixels and frames and tries again; then it is raised)
    ├── StoreError                  the job store cannot be written (full disk…) (exit 2)
    ├── DiskFullError               a file to store did not fit on the disk (service: 507)
    ├── WorkerCrashed               a worker process died (a poisoned clip; none could start)
    ├── ResumeError                 a job left by a dead process could not be taken up again
    ├── GroupFailed                 children of a group (a batch, a long video) failed
    ├── AlreadyRunning              another live process runs this same job (a long video)
    ├── RemoteError                 a running service answered the CLI with an error
    ├── InternalError               a bug in Chord (any other exception, stored)
    ├── BatchStopped                the CLI batch was stopped by Ctrl-C / SIGTERM
    └── JobCancelled                a job was cancelled by its owner
        └── DuplicateJob            the same clip and settings as another job: not run twice

Code raises these with a one-line ``message`` and a ``hint``; the CLI prints
``error: <message>`` and ``hint: <hint>`` and never a traceback.

Exit codes (and, in ``service/http_errors.py``, HTTP statuses) go by class: a table of
(class, code) ordered subclass-first, read with ``isinstance`` (httpx's ``map_exceptions``
does the same), never by comparing class names. A job's stored error is always made by
``ChordError.to_dict`` (its class's name, message and hint; ``internal_error`` for a bug,
``store_failure`` for SQLite): ``from_record`` rebuilds the instance (looked up among this
module's classes only) so a stored error maps by ``isinstance`` too; a name that is not one
of them is a bug (exit 1, HTTP 500). Every ChordError subclass lives here
(tests/unit/test_error_mapping.py imports every module and checks).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


class ChordError(Exception):
    """Base of all Chord errors. ``hint`` tells the user what to do next."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    @property
    def exit_code(self) -> int:
        """The CLI's exit code: one set on this error, else its class's (``EXIT_CODES``)."""
        own = getattr(self, "_exit_code", None)
        return own if own is not None else exit_code_for(self)

    @exit_code.setter
    def exit_code(self, code: int) -> None:
        self._exit_code = code

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, str]:
        return {"type": type(self).__name__, "message": self.message, "hint": self.hint}


class InputError(ChordError):
    """Something the user gave us is wrong; fixing the input fixes it."""


class VideoError(InputError):
    """The file is missing, empty, not a video, or cannot be decoded."""


class ConfigError(InputError):
    """An option, environment variable or config file value is invalid."""


class OutputError(InputError):
    """An output path is unusable: missing permission, a file where a folder should be,
    a read-only or full disk. Checked before analysing where possible."""


class ModelNotFoundError(InputError):
    """Model weights are not available locally and cannot be downloaded."""


class ModelError(ChordError):
    """The model exists but could not be loaded or placed on devices."""


class PlacementError(ModelError):
    """Part of the model would run from CPU/disk although GPUs are present."""


class ResourceError(ChordError):
    """The work does not fit in memory even after lowering batch, frames and pixels."""


class StoreError(ChordError):
    """The SQLite job store could not be read or written (disk full, I/O error). Jobs keep
    running; what could not be stored is said where it is kept instead."""


class DiskFullError(ChordError):
    """A file Chord had to write (an upload, a request body) did not fit on the disk: the
    request can be sent again once space is freed. The service answers 507."""


class WorkerCrashed(ChordError):
    """A worker process died: on one clip again and again (the clip is given up), or every
    time it started (no worker is left to run jobs). The service answers 503."""


class ResumeError(ChordError):
    """A job a dead process left unfinished was not taken up again: its process died while
    running it too many times (``leases.RESUME_LIMIT``), or its stored spec is unreadable.
    The job is failed with this reason; submitting the clip again retries it. The service
    answers 503 (the job could not be run here, the request itself was fine)."""


class OutOfMemory(ResourceError):
    """Out of GPU memory at batch size 1: the engine lowers the pixel/frame budget and tries
    again; raised past its last try. The service answers 503 with the hint."""


class GroupFailed(ChordError):
    """Children of a group (a batch's clips, a long video's chunks) failed: the message
    counts them and quotes the first; each child's own error is stored with it. The service
    answers 424 (Failed Dependency: the parent failed because its children did)."""


class AlreadyRunning(ChordError):
    """Another live process runs this very job (the same long-video run, started twice): it
    is not taken over, nor run twice. The service answers 409."""


class RemoteError(ChordError):
    """The service answered the CLI with an error; ``exit_code`` follows its status (4xx:
    bad input, exit 2). The service itself never raises it (502 if one is ever mapped)."""

    def __init__(self, status: int, message: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.exit_code = 2 if 400 <= status < 500 else 1


class InternalError(ChordError):
    """A bug in Chord: any exception that is not a ChordError, as stored (``internal_error``).
    The service answers a generic 500 (no message, no traceback reaches a client)."""


class BatchStopped(ChordError):
    """The CLI batch was stopped by Ctrl-C or SIGTERM; unfinished clips stay queued. Its exit
    code is 130 (Ctrl-C) or 143 (SIGTERM), set by ``runtime.batch.stopped``."""


class JobCancelled(ChordError):
    """The job was cancelled before it finished. ``partial``: what it had done by then, when
    that means something on its own (grounding: the frames finished — a partial Result, or
    a GroundChunk of a split job's share); None otherwise."""

    partial: object = None


class DuplicateJob(JobCancelled):
    """A stored job found again on resume with the same clip and settings as another one: it
    is cancelled (409) rather than run twice."""


def internal_error(exc: BaseException, log: str = "the log") -> dict[str, str]:
    """The error record of a job that failed on a bug in Chord rather than on its input
    (an ``InternalError``'s ``to_dict``); ``log`` names where the traceback went."""
    return InternalError(f"internal error: {type(exc).__name__}: {exc}",
                         hint=f"this is a bug in Chord; {log} has the traceback — please "
                              f"report it").to_dict()


def store_failure(exc: BaseException) -> StoreError:
    """The StoreError for a failed SQLite call (``sqlite3.Error``); a ChordError is kept."""
    if isinstance(exc, StoreError):
        return exc
    return StoreError(f"the job store failed: {exc}",
                      hint="check the disk that holds CHORD_DATA_DIR")


# (class, exit code), most specific first: the first ``isinstance`` match is the code
EXIT_CODES: tuple[tuple[type[ChordError], int], ...] = (
    (DiskFullError, 2), (StoreError, 2), (InputError, 2),  # fix the input or the disk
    (JobCancelled, 1), (ModelError, 1), (ResourceError, 1), (WorkerCrashed, 1),
    (ResumeError, 1), (GroupFailed, 1), (AlreadyRunning, 1), (RemoteError, 1),
    (InternalError, 1),
    (BatchStopped, 130),
    (ChordError, 1),
)


def by_class(table: Sequence[tuple[type[BaseException], int]], error: BaseException,
             default: int) -> int:
    """The value of the first row of ``table`` whose class ``error`` is an instance of."""
    return next((value for cls, value in table if isinstance(error, cls)), default)


def error_class(type_name: str) -> type[ChordError] | None:
    """The class of this module named ``type_name`` (a stored error's ``type``), or None."""
    found = globals().get(type_name)
    return found if isinstance(found, type) and issubclass(found, ChordError) else None


def from_record(error: Mapping[str, Any] | None) -> ChordError | None:
    """A stored error dict (``ChordError.to_dict``) as an instance of its class, so it maps
    by ``isinstance`` like a raised one; None for a name not among this module's classes."""
    cls = error_class(str((error or {}).get("type", "")))
    if cls is None:
        return None
    rebuilt = cls.__new__(cls)
    ChordError.__init__(rebuilt, str(error.get("message", "")), str(error.get("hint", "")))
    return rebuilt


def exit_code_for(error: BaseException | Mapping[str, Any] | None) -> int:
    """The exit code of an error, raised or stored (its dict): by class, 1 when unknown."""
    if error is None or isinstance(error, Mapping):
        error = from_record(error)
        if error is None:
            return 1
    return by_class(EXIT_CODES, error, 1)
