"""Every error Chord raises lives in ``chord_core/errors.py``, is stored with its class and
hint, and maps back to its HTTP status and exit code by ``isinstance`` (issue 38): a job
failed with each class in a real SQLite store reads back as that class, with its status —
an out-of-memory is a 503 with its hint, not a "bug" 500."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import chord_core
from chord_core import errors as E
from chord_core.runtime.store import Store
from chord_core.service.http_errors import from_job_error

ROOT = Path(__file__).resolve().parents[2]
# every class of the tree: (HTTP status of a job failed with it, CLI exit code)
EXPECTED: dict[type[E.ChordError], tuple[int, int]] = {
    E.ChordError: (500, 1), E.InputError: (400, 2), E.VideoError: (422, 2),
    E.ConfigError: (400, 2), E.OutputError: (400, 2), E.ModelNotFoundError: (404, 2),
    E.ModelError: (503, 1), E.PlacementError: (503, 1), E.ResourceError: (503, 1),
    E.OutOfMemory: (503, 1), E.StoreError: (503, 2), E.DiskFullError: (507, 2),
    E.WorkerCrashed: (503, 1), E.ResumeError: (503, 1), E.GroupFailed: (424, 1),
    E.RemoteError: (502, 1), E.InternalError: (500, 1), E.BatchStopped: (409, 130),
    E.JobCancelled: (409, 1), E.DuplicateJob: (409, 1), E.AlreadyRunning: (409, 1),
}


def _classes() -> list[type[E.ChordError]]:
    return [c for _, c in inspect.getmembers(E, inspect.isclass) if issubclass(c, E.ChordError)]


def _make(cls: type[E.ChordError]) -> E.ChordError:
    if cls is E.RemoteError:
        return E.RemoteError(500, "the service failed", hint="see its log")
    return cls(f"{cls.__name__} happened", hint=f"what to do about {cls.__name__}")


def test_the_table_names_every_class_of_the_tree() -> None:
    assert set(_classes()) == set(EXPECTED)


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_a_stored_error_reads_back_as_its_class_with_its_status(tmp_path: Path,
                                                                cls: type[E.ChordError]) -> None:
    status, code = EXPECTED[cls]
    error = _make(cls)
    with Store(tmp_path / "chord.sqlite3") as store:
        store.add_job("j1", video_path="/clips/a.mp4", task="describe")
        store.update_state("j1", "failed", error=error.to_dict())
        stored = store.get_job("j1")["error"]
    rebuilt = E.from_record(stored)
    assert type(rebuilt) is cls and rebuilt.hint == error.hint
    api = from_job_error(stored)
    assert api.status == status and E.exit_code_for(stored) == (code if cls is not
                                                                E.BatchStopped else 130)
    if status != 500:  # a bug's message stays in the log: the client gets the generic one
        assert (api.message, api.hint) == (error.message, error.hint)
    else:
        assert "bug in Chord" in api.hint and error.message not in api.message


def test_out_of_memory_is_a_503_with_its_hint_not_a_bug() -> None:
    from chord_core.analysis import engine

    assert engine.OutOfMemory is E.OutOfMemory
    oom = E.OutOfMemory("the GPU ran out of memory even at batch size 1",
                        hint="lower --max-pixels or --max-frames")
    api = from_job_error(oom.to_dict())
    assert (api.status, api.hint) == (503, "lower --max-pixels or --max-frames")


def test_internal_error_records_are_internal_errors() -> None:
    record = E.internal_error(ZeroDivisionError("division by zero"))
    assert type(E.from_record(record)) is E.InternalError
    assert "ZeroDivisionError" in record["message"] and from_job_error(record).status == 500


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(chord_core.__path__, "chord_core."):
        if ".testing" in info.name or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_every_chord_error_class_is_defined_in_errors_py() -> None:
    for name in _modules():
        try:
            importlib.import_module(name)
        except ImportError:  # an optional dependency (ray, streamlit …) not installed
            continue

    def subclasses(cls: type) -> list[type]:
        return [s for c in cls.__subclasses__() for s in (c, *subclasses(c))]

    stray = [f"{c.__module__}.{c.__qualname__}" for c in subclasses(E.ChordError)
             if c.__module__.startswith("chord_core") and c.__module__ != E.__name__]
    assert stray == []


_NAMES = "(" + "|".join(c.__name__ for c in EXPECTED) + r"|Duplicate)"
HAND_WRITTEN = re.compile(r'["\']type["\']\s*:\s*["\']' + _NAMES + r'["\']')
BY_NAME = re.compile(r'["\']type["\'](\)|\])\s*[!=]=\s*["\']' + _NAMES + r'["\']')


def test_no_error_record_is_written_by_hand_and_none_is_compared_by_name() -> None:
    found = []
    for folder in ("chord_core", "chord_ui", "views"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "errors.py":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if HAND_WRITTEN.search(line) or BY_NAME.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []
