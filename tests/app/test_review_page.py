"""The Review page in Streamlit's AppTest (no browser) over a real store with alerts on real
clips: the items listed newest first, the buttons the keys trigger move, mark and unmark,
"mark all reviewed" empties the unreviewed list, and the filters narrow it."""

from __future__ import annotations

from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reviewed(tmp_path, monkeypatch):
    from chord_core.library.alerts import store_alert
    from chord_core.library.index import LibraryIndex

    media = tmp_path / "media"
    media.mkdir()
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    db = tmp_path / "data" / "chord.sqlite3"
    with LibraryIndex(db) as index:  # alerts as the standing checks store them
        for n, statement in enumerate(("a person at the gate", "a van at the dock")):
            clip = make_video(media / f"cam{n}.mp4", duration_s=2.0, fps=5.0,
                              size_wh=(96, 72), seed=n).path
            store_alert(index, "w", {"clip_key": f"k{n}", "statement": statement,
                                     "path": str(clip), "job_id": f"j{n}"},
                        {"start_s": 1.0, "end_s": 1.4, "probability": 0.9, "evidence": []})
    from chord_ui import resources

    with LibraryIndex(db) as index:  # the page's index: this store, not the session's
        monkeypatch.setattr(resources, "library_index", lambda: index)
        yield db


def _app():  # noqa: ANN202
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(ROOT / "views" / "review.py"), default_timeout=60).run()


def _reviewed(db) -> list[tuple]:  # noqa: ANN001
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT item, reviewed_by FROM library_review ORDER BY item"
                            ).fetchall()


def _button(at, key: str):  # noqa: ANN001, ANN202
    return next(b for b in at.button if b.key == key)


def test_the_review_page_moves_marks_and_filters(reviewed):
    at = _app()
    assert not at.exception, at.exception
    texts = [m.value for m in at.markdown]
    assert any(v.startswith("**cam1.mp4** · 0:01–0:01 · alert · score 0.90") for v in texts)
    assert any(c.value.startswith("Item 1 of 2 · 2 not reviewed") for c in at.caption)
    _button(at, "review-next").click().run()
    assert any(c.value.startswith("Item 2 of 2") for c in at.caption)
    assert any(v.startswith("**cam0.mp4**") for v in (m.value for m in at.markdown))
    _button(at, "review-mark").click().run()  # cam0 reviewed; it leaves the unreviewed list
    assert _reviewed(reviewed) == [("a1", "app")]
    assert any(c.value.startswith("Item 1 of 1 · 1 not reviewed") for c in at.caption)
    at.selectbox(key="review-reviewed").set_value("all").run()
    assert any(c.value.startswith("Item 1 of 2 · 1 not reviewed") for c in at.caption)
    at.text_input(key="review-statement").input("gate").run()
    assert any(c.value.startswith("Item 1 of 1") for c in at.caption)
    _button(at, "review-unmark").click().run()
    assert _reviewed(reviewed) == []
    at.text_input(key="review-statement").input("").run()
    at.selectbox(key="review-reviewed").set_value("unreviewed").run()
    _button(at, "review-mark-all").click().run()
    assert _reviewed(reviewed) == [("a1", "app"), ("a2", "app")]
    assert any(i.value.startswith("No review items here") for i in at.info)
