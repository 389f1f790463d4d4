"""Watches saved from the app (library/watch_saved.py) over a real store file: what is
refused (outside the media roots, chapters, a ground without its target, too many or too
long statements, control characters, a bad threshold, past the most) and what is kept
(``AppWatches.sync``: tests/app/test_watch_page.py)."""

from __future__ import annotations

import pytest

from chord_core.errors import InputError


@pytest.fixture
def library(tmp_path, monkeypatch):
    from chord_core.library.index import LibraryIndex

    media = tmp_path / "media"
    (media / "yard").mkdir(parents=True)
    (media / "dock").mkdir()
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    with LibraryIndex(tmp_path / "data" / "chord.sqlite3") as index:
        yield index, media, tmp_path


BAD = {
    "outside the roots": (lambda m, t: {"folder": str(t)}, "not a folder under the media roots"),
    "a missing folder": (lambda m, t: {"folder": str(m / "nope")}, "not a folder under"),
    "a traversal": (lambda m, t: {"folder": str(m / "yard" / ".." / "..")}, "not a folder"),
    "chapters": (lambda m, t: {"folder": str(m / "yard"), "task": "chapters"}, "chapters"),
    "ground without a target": (lambda m, t: {"folder": str(m / "yard"), "task": "ground"},
                                "needs --query"),
    "eleven statements": (lambda m, t: {"folder": str(m / "yard"),
                                        "statements": [f"s{i}" for i in range(11)]},
                          "at most 10"),
    "a long statement": (lambda m, t: {"folder": str(m / "yard"), "statements": ["x" * 201]},
                         "longer than 200"),
    "a control character": (lambda m, t: {"folder": str(m / "yard"),
                                          "statements": ["a\x00b"]}, "control"),
    "threshold 0": (lambda m, t: {"folder": str(m / "yard"), "threshold": 0.0},
                    "threshold"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_watch_is_refused_with_a_hint(library, case: str) -> None:
    from chord_core.library.watch_saved import save_watch, saved_watches

    index, media, tmp = library
    make, words = BAD[case]
    with pytest.raises(InputError) as err:
        save_watch(index, **make(media, tmp))
    assert words in err.value.message and err.value.hint
    assert saved_watches(index) == []


def test_a_watch_is_saved_once_and_updated(library) -> None:
    from chord_core.library.watch_saved import remove_watch, save_watch, saved_watches

    index, media, _ = library
    row = save_watch(index, str(media / "yard" / "."), "describe", "",
                     ["a person climbs\nthe fence", " ", "a van at the gate"], 0.7)
    assert (row["folder"], row["statements"], row["threshold"]) == (
        str(media / "yard"), ["a person climbs the fence", "a van at the gate"], 0.7)
    again = save_watch(index, str(media / "yard"), statements=["a dog"], threshold=0.9)
    assert again["id"] == row["id"] and [w["statements"] for w in saved_watches(index)] == [
        ["a dog"]]
    assert remove_watch(index, row["id"]) and saved_watches(index) == []
    assert not remove_watch(index, row["id"])


def test_at_most_so_many_watches(library, monkeypatch) -> None:
    from chord_core.library import watch_saved

    index, media, _ = library
    monkeypatch.setattr(watch_saved, "MAX_SAVED", 2)
    watch_saved.save_watch(index, str(media / "yard"))
    watch_saved.save_watch(index, str(media / "dock"))
    with pytest.raises(InputError, match="the most"):
        watch_saved.save_watch(index, str(media / "yard"), "ground", "a forklift")
    watch_saved.save_watch(index, str(media / "yard"), statements=["x"])  # an update is fine
