"""Watch folders set on the Library page (AppTest, real store): the form saves a watch under
the media roots, refuses one outside them with the reason, shows each saved watch's state
(running here, its files and alerts from the watch tables) and removes it; and
``AppWatches.sync`` starting, restarting and stopping a process's watchers as the saved rows
change. The watcher threads are the boundary (``Recorder`` stands in for
``BackgroundWatches``); the real watcher and its checks run in
tests/integration/test_alerts.py."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Recorder:
    """Stands in for ``BackgroundWatches`` (the watcher threads)."""

    log: list[tuple[str, str, tuple[str, ...]]] = []

    def __init__(self, manager, store, settings) -> None:  # noqa: ANN001
        from chord_core.media.roots import resolve_folder

        [s] = settings
        resolve_folder(s.folder)  # as FolderWatcher does: a folder gone since is refused
        self.pairs = [(type("W", (), {"settings": s})(), None)]

    def start(self) -> Recorder:
        s = self.pairs[0][0].settings
        Recorder.log.append(("start", Path(s.folder).name, s.statements))
        return self

    def stop(self) -> None:
        s = self.pairs[0][0].settings
        Recorder.log.append(("stop", Path(s.folder).name, s.statements))


@pytest.fixture
def page(tmp_path, monkeypatch):
    from chord_core.library import background
    from chord_core.library.index import LibraryIndex
    from chord_core.library.watch_saved import AppWatches
    from chord_ui import resources

    media = tmp_path / "media"
    (media / "yard").mkdir(parents=True)
    (media / "dock").mkdir()
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    monkeypatch.setattr(background, "BackgroundWatches", Recorder)
    runner = AppWatches(None, None, "test")
    with LibraryIndex(tmp_path / "data" / "chord.sqlite3") as index:
        monkeypatch.setattr(resources, "library_index", lambda: index)
        monkeypatch.setattr(resources, "app_watches", lambda: runner)
        yield index, media, runner, tmp_path


def _app():  # noqa: ANN202
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(ROOT / "views" / "library.py"), default_timeout=60).run()


def _submit(at, folder: str, statements: str = ""):  # noqa: ANN001, ANN202
    at.text_input(key="watch-folder").input(folder)
    at.text_area(key="watch-statements").input(statements)
    return next(b for b in at.button if "Watch" in b.label).click().run()


def test_a_watch_is_saved_shown_with_its_state_and_removed(page) -> None:
    from chord_core.library.alerts import store_alert
    from chord_core.library.watch_saved import saved_watches

    index, media, runner, tmp = page
    at = _app()
    assert not at.exception, at.exception
    assert any("No folder is watched from here yet." in c.value for c in at.caption)
    at = _submit(at, str(tmp), "a person climbs the fence")  # outside the media roots
    assert "not a folder under the media roots" in at.error[0].value
    assert saved_watches(index) == []
    at = _submit(at, str(media / "yard"), "a person climbs the fence\na van at the gate")
    assert not at.error, [e.value for e in at.error]
    [row] = saved_watches(index)
    assert row["statements"] == ["a person climbs the fence", "a van at the gate"]
    assert any(c.value == "Not running in this process" for c in at.caption)
    runner.sync(saved_watches(index))  # what app.py's start_saved does on the next run
    watch = runner.watch_id(row["id"])
    with index.write() as conn:  # one clip analysed by the watch, and an alert from it
        conn.execute("INSERT INTO library_watch_files VALUES (?, 'k1', ?, 1, 1, 'done', 'j1',"
                     " NULL, 'me', 0)", (watch, str(media / "yard" / "a.mp4")))
    store_alert(index, watch, {"clip_key": "k1", "statement": "a van at the gate",
                               "path": str(media / "yard" / "a.mp4"), "job_id": "j2"},
                {"start_s": 1.0, "end_s": 2.0, "probability": 0.9, "evidence": []})
    at.run()
    assert any(c.value.startswith("Running · 1 clip(s) done · 0 failed · 0 in work · "
                                  "0 check(s) waiting · 1 alert(s)") for c in at.caption), \
        [c.value for c in at.caption]
    next(b for b in at.button if b.key == f"watch-remove-{row['id']}").click().run()
    assert saved_watches(index) == []
    assert any("No folder is watched from here yet." in c.value for c in at.caption)


def test_app_watches_follow_the_saved_rows(page, monkeypatch) -> None:
    from chord_core.library import background
    from chord_core.library.watch_saved import (
        AppWatches, remove_watch, save_watch, saved_watches, settings_of)

    index, media, _, _ = page
    monkeypatch.setattr(background, "BackgroundWatches", Recorder)
    Recorder.log = []
    yard = save_watch(index, str(media / "yard"), statements=["a"])
    taken = settings_of(save_watch(index, str(media / "dock")), "test").watch_id
    runner = AppWatches(None, None, "test", taken=[taken])
    runner.sync(saved_watches(index))
    runner.sync(saved_watches(index))  # nothing changed: nothing started twice
    assert Recorder.log == [("start", "yard", ("a",))]
    assert runner.watch_id(yard["id"]) == settings_of(yard, "test").watch_id
    assert "CHORD_WATCH already watches" in next(iter(runner.errors.values()))
    save_watch(index, str(media / "yard"), statements=["a", "b"])  # its checks changed
    runner.sync(saved_watches(index))
    assert Recorder.log[1:] == [("stop", "yard", ("a",)), ("start", "yard", ("a", "b"))]
    remove_watch(index, yard["id"])
    runner.sync(saved_watches(index))
    assert Recorder.log[-1] == ("stop", "yard", ("a", "b")) and runner.watch_id(
        yard["id"]) is None
    gone = save_watch(index, str(media / "yard"))
    (media / "yard").rmdir()  # the folder went away before the start
    runner.sync(saved_watches(index))
    assert "not a folder under the media roots" in runner.errors[gone["id"]]
