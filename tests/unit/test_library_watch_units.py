"""Watch folders and standing checks at their seams: CHORD_WATCH parsing, refused settings,
moments from an entailment curve, the claim of a file (atomic, rename-proof), a folder
outside the media roots."""

from __future__ import annotations

import pytest

from chord_core.errors import ConfigError, InputError
from chord_core.library.alerts import moments
from chord_core.library.background import watches_from_env
from chord_core.library.watch import WatchSettings


def test_chord_watch_names_folders_tasks_queries_and_checks():
    env = {"CHORD_WATCH": "/m/cams; /m/dock|ground|a forklift ;",
           "CHORD_WATCH_CHECKS": "a person climbs the fence;; a forklift enters the walkway",
           "CHORD_WATCH_THRESHOLD": "0.7", "CHORD_WATCH_HOOK": "logger -t chord"}
    cams, dock = watches_from_env("test", env)
    assert (cams.folder, cams.task, cams.query) == ("/m/cams", "describe", "")
    assert (dock.folder, dock.task, dock.query) == ("/m/dock", "ground", "a forklift")
    assert cams.statements == ("a person climbs the fence", "a forklift enters the walkway")
    assert (cams.threshold, cams.hook) == (0.7, "logger -t chord")
    assert watches_from_env("test", {}) == []


@pytest.mark.parametrize("kwargs, words", [
    ({"task": "dance"}, "task is one of"),
    ({"task": "ground"}, "needs --query"),
    ({"settle_s": -1}, "settle time"),
    ({"threshold": 0.0}, "threshold"),
], ids=["bad-task", "ground-without-target", "negative-settle", "zero-threshold"])
def test_bad_watch_settings_are_refused_with_a_hint(kwargs, words):
    with pytest.raises(ConfigError, match=words) as err:
        WatchSettings("/m", **kwargs)
    assert err.value.hint


def test_a_bad_threshold_variable_is_said():
    with pytest.raises(ConfigError, match="not a number"):
        watches_from_env("test", {"CHORD_WATCH": "/m", "CHORD_WATCH_THRESHOLD": "high"})


def _frames(probs):
    return [{"t_s": i * 0.5, "frame_index": i * 5, "entailment": p} for i, p in
            enumerate(probs)]


@pytest.mark.parametrize("probs, spans", [
    ([0.1, 0.9, 0.95, 0.2, 0.85], [(0.5, 1.0, 0.95), (2.0, 2.0, 0.85)]),
    ([0.1, 0.2], []),
    ([0.8, 0.8], [(0.0, 0.5, 0.8)]),
], ids=["two-moments", "none", "at-threshold"])
def test_moments_are_runs_of_frames_over_the_threshold(probs, spans):
    found = moments(_frames(probs), 0.8)
    assert [(m["start_s"], m["end_s"], m["probability"]) for m in found] == spans
    for m in found:
        assert all(m["start_s"] <= e["t_s"] <= m["end_s"] for e in m["evidence"])


def test_a_claim_is_taken_once_and_follows_a_rename(tmp_path):
    from chord_core.library.index import LibraryIndex
    from chord_core.library.watch_table import WatchTable

    with LibraryIndex(tmp_path / "chord.sqlite3") as index:
        one, two = WatchTable(index, "w-1"), WatchTable(index, "w-1")
        assert one.claim("k", "/m/a.mp4", 10, 1) is True
        assert two.claim("k", "/m/b.mp4", 10, 1) is False  # the same content, renamed
        assert [r["path"] for r in one.rows()] == ["/m/b.mp4"]
        assert WatchTable(index, "w-2").claim("k", "/m/a.mp4", 10, 1) is True  # other watch


def test_a_folder_outside_the_media_roots_is_refused(tmp_path, monkeypatch):
    from chord_core.library.watch import FolderWatcher
    from chord_core.runtime.store import Store

    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(tmp_path / "media"))
    (tmp_path / "media").mkdir()
    with Store(tmp_path / "chord.sqlite3") as store, pytest.raises(InputError,
                                                                   match="media roots"):
        FolderWatcher(None, store, WatchSettings(str(tmp_path)))


class _Submits:
    """The job manager at its boundary: records what is submitted; knows no job after."""

    def __init__(self) -> None:
        self.specs: list = []

    def submit(self, spec) -> str:  # noqa: ANN001
        self.specs.append(spec)
        return f"job-{len(self.specs)}"

    def status(self, job_id: str):  # noqa: ANN201
        raise KeyError(job_id)


def test_a_clip_done_whose_check_was_never_claimed_is_checked_once(tmp_path, monkeypatch):
    """The watcher marked a clip done but its check was not claimed (the store busy past
    its timeout between the two, under disk load): the standing checks say they are busy
    and claim it at the next backfill step, once, not at the next restart."""
    from chord_core.library import alerts
    from chord_core.library.watch import FolderWatcher
    from chord_core.runtime.store import Store

    media = tmp_path / "media"
    media.mkdir()
    clip = media / "gate.mp4"
    clip.write_bytes(b"not read here")
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    manager = _Submits()
    with Store(tmp_path / "chord.sqlite3") as store:
        watcher = FolderWatcher(manager, store, WatchSettings(str(media), statements=("a",)))
        checks = alerts.StandingChecks(manager, store, watcher)
        assert not checks.busy()
        assert watcher.table.claim("k1", str(clip), 13, 1)
        watcher.table.mark("k1", "done")  # ...and clip_done never ran
        assert checks.busy()  # a clip still to check: a CLI's --idle-exit waits for it
        checks.step()
        assert manager.specs == []  # not before BACKFILL_EVERY_S
        monkeypatch.setattr(alerts, "BACKFILL_EVERY_S", 0.0)
        for _ in range(3):
            checks.step()
        assert [(s.request.task, s.request.query) for s in manager.specs] == [("entail", "a")]
        assert not checks.busy()  # the job is gone: the check ended as an error
        assert [c["state"] for c in checks._checks("error")] == ["error"]  # noqa: SLF001
