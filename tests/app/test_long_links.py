"""A long-video run's link (``?job=<parent>``) on the Analyze page, in AppTest: a chapters run
finished before the server started (only the store's parent row knows it) opens with its
chapters and its last search; a link to the search opens its chapters run; a run the store
has unfinished says how far it got. Real SQLite store, real clip, test model."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest


@pytest.fixture()
def own_store(monkeypatch, tmp_path):
    from chord_core.runtime.store import Store
    from chord_ui import resources

    store = Store(tmp_path / "own.sqlite3")
    monkeypatch.setattr(resources, "store", lambda: store)
    monkeypatch.setenv("CHORD_LONG_VIDEO_S", "1")  # the 3 s session clip is a long video
    yield store
    store.close()


def _stored_run(store, path: Path, state: str = "done") -> str:
    """A chapters run (and a search in it) as the job manager stored it."""
    from chord_core.longvideo.chapters import chapters_run_id
    from chord_core.longvideo.doc import Chapter, ChaptersDoc, SearchDoc
    from chord_core.longvideo.settings import settings_from_env
    from chord_core.runtime.parents import ParentJobs
    from chord_ui.uploads import local_source

    key = local_source(str(path)).key
    run = chapters_run_id(key, settings_from_env(), "test")
    parents = ParentJobs(store)
    parents.open(run, kind="chapters", video_path=str(path), model="test", label=path.name,
                 spec={"task": "describe", "video_key": key})
    doc = ChaptersDoc(video={"path": str(path), "duration_s": 3.0}, model={"id": "test"},
                      settings={}, scan={}, chunks=(), chunk_texts=(), summary="Two scenes.",
                      chapters=(Chapter(0, 0.0, 1.5, 0, "Opening <b>scene</b>", "A square.",
                                        (0,)),
                                Chapter(1, 1.5, 3.0, 15, "Second scene", "It moves.", (1,))),
                      run_id=run)
    if state != "done":
        parents.summarise(run, {"progress": {"stage": "chunks", "done": 1, "total": 2}})
        store.update_state(run, state)
        return run
    parents.finish(run, "done", {"document": doc.to_dict()})
    found = SearchDoc(query="the square moves", method="entail", video={}, candidates=(),
                      hits=(), frames_checked=7)
    parents.open("lvs-000000000001", kind="search", video_path=str(path), model="test",
                 label=path.name, query="the square moves", parent=run)
    parents.finish("lvs-000000000001", "done", {"document": found.to_dict()})
    return run


def _clip(tmp_path: Path, app_clip: Path) -> Path:
    path = tmp_path / f"long-{uuid.uuid4().hex[:8]}.mp4"
    shutil.copyfile(app_clip, path)
    return path


@pytest.mark.parametrize("link", ["chapters", "search"], ids=["chapters-link", "search-link"])
def test_a_finished_run_opens_from_its_link_after_a_restart(new_app, own_store, app_clip,
                                                            tmp_path, link) -> None:
    path = _clip(tmp_path, app_clip)
    run = _stored_run(own_store, path)
    at = new_app()
    at.query_params["job"] = run if link == "chapters" else "lvs-000000000001"
    at.run()
    assert not at.exception
    assert [s.value for s in at.subheader] == ["Chapters"]
    text = " ".join(m.value for m in at.markdown)
    assert "Opening \\<b\\>scene\\</b\\>" in text or "Opening &lt;b&gt;" in text
    assert "Second scene" in text and "Two scenes." in text
    assert any("Not found in the chapters checked (7 frames)" in c.value for c in at.caption)
    assert at.text_input(key=next(k.key for k in at.text_input if k.key.startswith(
        "search-q-"))).value == "the square moves"
    assert at.query_params["job"] == run  # the page names the chapters run


def test_an_unfinished_run_says_how_far_it_got(new_app, own_store, app_clip,
                                               tmp_path) -> None:
    path = _clip(tmp_path, app_clip)
    run = _stored_run(own_store, path, state="cancelled")
    at = new_app()
    at.query_params["job"] = run
    at.run()
    assert not at.exception and not at.subheader
    assert any("stopped at 1/2 (cancelled)" in c.value for c in at.caption)
    assert at.query_params["job"] == run
