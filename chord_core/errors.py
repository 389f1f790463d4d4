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
    ├── StoreError                  the job store cannot be written (full disk…) (exit 2)
    ├── DiskFullError               a file to store did not fit on the disk (service: 507)
    └── JobCancelled                a job was cancelled by its owner

Code raises these with a one-line ``message`` and a ``hint``; the CLI prints
``error: <message>`` and ``hint: <hint>`` and never a traceback.
"""

from __future__ import annotations


class ChordError(Exception):
    """Base of all Chord errors. ``hint`` tells the user what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message

    def to_dict(self) -> dict[str, str]:
        return {"type": type(self).__name__, "message": self.message, "hint": self.hint}


class InputError(ChordError):
    """Something the user gave us is wrong; fixing the input fixes it."""

    exit_code = 2


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

    exit_code = 2


class DiskFullError(ChordError):
    """A file Chord had to write (an upload, a request body) did not fit on the disk: the
    request can be sent again once space is freed. The service answers 507."""

    exit_code = 2


class JobCancelled(ChordError):
    """The job was cancelled before it finished. ``partial``: what it had done by then, when
    that means something on its own (grounding: the frames finished — a partial Result, or
    a GroundChunk of a split job's share); None otherwise."""

    exit_code = 1
    partial: object = None


def internal_error(exc: BaseException, log: str = "the log") -> dict[str, str]:
    """The error record of a job that failed on a bug in Chord rather than on its input
    (same keys as ``ChordError.to_dict``); ``log`` names where the traceback went."""
    return {"type": type(exc).__name__, "message": f"internal error: {exc}",
            "hint": f"this is a bug in Chord; {log} has the traceback — please report it"}
