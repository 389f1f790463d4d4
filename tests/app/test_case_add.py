""""Add to case" outside the Review page, in Streamlit's AppTest over a real store: the
Library page's search hit goes into the case named in its box, and a result's moment (a
segment, or the whole clip) goes in from its popover; the case then exports both."""

from __future__ import annotations

from pathlib import Path

import pytest

from chord_core.testing.videos import make_video

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def library(tmp_path, monkeypatch):
    from chord_core.library.index import LibraryIndex
    from chord_core.runtime.store import Store
    from chord_core.testing.library_docs import result_doc, store_result
    from chord_ui import resources

    media = tmp_path / "media"
    media.mkdir()
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    clip = make_video(media / "dock.mp4", duration_s=3.0, fps=10.0, size_wh=(96, 72)).path
    db = tmp_path / "data" / "chord.sqlite3"
    with Store(db) as store:
        store_result(store, "g1", result_doc("ground", str(clip), query="a forklift",
                                             duration_s=3.0, segments=[(0.5, 1.5)]))
    with LibraryIndex(db) as index:
        monkeypatch.setattr(resources, "library_index", lambda: index)
        yield index, clip


def _moments(index) -> list[tuple]:  # noqa: ANN001
    from chord_core.library.cases import cases, moments

    return [(c["name"], m["origin"], m["job_id"], m["start_s"], m["end_s"])
            for c in cases(index) for m in moments(index, c["name"])]


def test_a_library_hit_goes_into_the_named_case(library):
    from streamlit.testing.v1 import AppTest

    index, _ = library
    at = AppTest.from_file(str(ROOT / "views" / "library.py"), default_timeout=60)
    at.query_params["q"] = "forklift"
    at.run()
    assert not at.exception, at.exception
    at.text_input(key="library-case").input("dock night").run()
    next(b for b in at.button if b.key == "library-case-0").click().run()
    assert not at.exception, at.exception
    assert _moments(index) == [("dock night", "search", "g1", 0.5, 1.5)]
    assert any("dock night" in toast.value for toast in at.toast)


def _result_script() -> None:
    from chord_core.types import Result
    from chord_ui import case_add, resources

    doc = resources.library_index().read(
        "SELECT result_json FROM results WHERE job_id = 'g1'")[0]["result_json"]
    import json

    case_add.result_control(Result.from_dict(json.loads(doc)), "g1")


def test_a_results_segment_and_whole_clip_go_into_a_case_and_export(library, tmp_path):
    from streamlit.testing.v1 import AppTest

    from chord_core.library.case_export import export_case

    index, clip = library
    at = AppTest.from_function(_result_script, default_timeout=60).run()
    assert not at.exception, at.exception
    moment = at.selectbox(key="case-moment-g1")
    assert moment.options == ["0.5–1.5 s · a forklift", "The whole clip (0:00–0:03)"]
    at.text_input(key="case-name-g1").input("dock").run()
    next(b for b in at.button if b.key == "case-add-g1").click().run()
    at.selectbox(key="case-moment-g1").set_value(1).run()  # the whole clip
    next(b for b in at.button if b.key == "case-add-g1").click().run()
    assert not at.exception, at.exception
    assert _moments(index) == [("dock", "result", "g1", 0.5, 1.5),
                               ("dock", "result", "g1", 0.0, 3.0)]
    folder = export_case(index, "dock", tmp_path / "out")
    import json

    doc = json.loads((folder / "case.json").read_text())
    assert [(m["cut"] != "none", m["error"]) for m in doc["moments"]] == [(True, None)] * 2
    assert all(m["path"] == str(clip) for m in doc["moments"])
