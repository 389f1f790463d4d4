"""Review items and cases over a real job store (SQLite) and real clips: alerts stored as the
standing checks store them become items; marking, filters and "mark all" change the table;
a case of moments is exported and its files read back — the clips' durations by ffprobe,
the JSON against its schema, the stills as images, the ZIP as an archive."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from chord_core.errors import InputError
from chord_core.testing.videos import make_video


@pytest.fixture
def library(tmp_path, monkeypatch):
    from chord_core.library.index import LibraryIndex

    media = tmp_path / "media" / "yard"
    media.mkdir(parents=True)
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(tmp_path / "media"))
    index = LibraryIndex(tmp_path / "data" / "chord.sqlite3")
    yield index, media
    index.close()


def _alert(index, path: Path, start: float, end: float, p: float, statement: str) -> int:  # noqa: ANN001
    from chord_core.library.alerts import store_alert

    check = {"clip_key": f"k-{path.name}", "statement": statement, "path": str(path),
             "job_id": f"job-{path.stem}"}
    moment = {"start_s": start, "end_s": end, "probability": p,
              "evidence": [{"t_s": start, "frame_index": 0, "entailment": p}]}
    return store_alert(index, "w-test", check, moment)


def _ffprobe_duration(path: Path) -> float:
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                          "-of", "json", str(path)], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["format"]["duration"])


def test_alerts_become_review_items_marked_by_id_and_by_filter(library):
    from chord_core.library import review

    index, media = library
    a = _alert(index, media / "gate.mp4", 1.0, 2.0, 0.91, "a person climbs the fence")
    b = _alert(index, media / "dock.mp4", 0.5, 0.5, 0.83, "a forklift enters the walkway")
    doc = review.listing(index)
    assert doc["schema"] == review.REVIEW_SCHEMA and doc["count"] == 2
    assert doc["unreviewed"] == 2
    first = {i["id"]: i for i in doc["items"]}[f"a{a}"]
    assert (first["severity"], first["clip"], first["start_s"], first["end_s"],
            first["score"], first["reviewed"]) == ("alert", "gate.mp4", 1.0, 2.0, 0.91, False)
    assert first["source"] == str(media)
    assert review.mark(index, [f"a{a}"], by="ana") == 1
    assert review.mark(index, [f"a{a}"], by="bob") == 0  # kept: first time and reviewer
    item = {i["id"]: i for i in review.items(index)}[f"a{a}"]
    assert item["reviewed"] and item["reviewed_by"] == "ana" and item["reviewed_at"] > 0
    left = review.items(index, review.ReviewFilters(reviewed=False))
    assert [i["id"] for i in left] == [f"a{b}"]
    assert [i["id"] for i in review.items(index, review.ReviewFilters(statement="forklift"))] \
        == [f"a{b}"]
    assert review.mark_all(index, review.ReviewFilters(), by="ana") == 1
    assert review.listing(index)["unreviewed"] == 0
    assert review.mark(index, [f"a{b}"], reviewed=False) == 1
    assert review.listing(index)["unreviewed"] == 1
    with pytest.raises(InputError, match="not a review item id"):
        review.mark(index, ["1; DROP TABLE library_alerts"])
    with pytest.raises(InputError, match="severity"):
        review.items(index, review.ReviewFilters(severity="urgent"))
    by_day = review.timeline(review.items(index))
    [(day, sources)] = by_day.items()
    assert sorted(len(v) for v in sources.values()) == [2]


@pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffprobe (Debian's ffmpeg) missing")
def test_a_case_exports_remuxed_clips_stills_json_and_reports(library, tmp_path):
    import jsonschema
    from PIL import Image

    from chord_core.library import cases, review
    from chord_core.library.case_export import CASE_JSON_SCHEMA, export_case

    index, media = library
    clip = make_video(media / "gate.mp4", duration_s=6.0, fps=10.0, size_wh=(160, 120)).path
    avi = make_video(media / "old.avi", duration_s=3.0, fps=10.0, size_wh=(160, 120)).path
    _alert(index, clip, 2.0, 3.5, 0.9, "a person climbs the fence")
    _alert(index, avi, 1.0, 1.5, 0.8, "a <b>tag</b> in the statement")
    for item in review.items(index):
        assert cases.add_review_item(index, "yard 2026-12-03", item)
    assert not cases.add_review_item(index, "yard 2026-12-03", review.items(index)[0])
    gone = media / "gone.mp4"
    cases.add_moment(index, "yard 2026-12-03", path=str(gone), start_s=0, end_s=1,
                     label="deleted since", origin="search")
    assert [c["moments"] for c in cases.cases(index)] == [3]

    folder = export_case(index, "yard 2026-12-03", tmp_path / "out")
    doc = json.loads((folder / "case.json").read_text())
    jsonschema.validate(doc, CASE_JSON_SCHEMA)
    by_clip = {m["clip"]: m for m in doc["moments"]}
    assert by_clip["gone.mp4"]["error"] and by_clip["gone.mp4"]["clip_file"] is None
    for name, (start, end) in {"gate.mp4": (2.0, 3.5), "old.avi": (1.0, 1.5)}.items():
        m = by_clip[name]
        assert m["cut"] == "remuxed" and m["error"] is None
        assert m["clip_start_s"] <= start + 1e-6 and m["clip_end_s"] >= end - 0.1 - 1e-6
        duration = _ffprobe_duration(folder / m["clip_file"])
        want = m["clip_end_s"] - m["clip_start_s"]
        assert want - 0.05 <= duration <= want + 0.25, (name, duration, want)
        assert duration < 6.0  # a cut, not the whole clip
        with Image.open(folder / m["still"]) as im:
            assert im.size[0] == 640
    html = (folder / "report.html").read_text()
    assert "&lt;b&gt;tag&lt;/b&gt;" in html and "<b>tag" not in html
    md = (folder / "report.md").read_text()
    assert "0:02–0:04" in md and "stills/" in md

    archive = export_case(index, "yard 2026-12-03", tmp_path / "zipped", as_zip=True)
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
    assert any(n.endswith("case.json") for n in names)
    assert sum("/clips/" in n and not n.endswith("/") for n in names) == 2
    with pytest.raises(InputError, match="not a case name"):
        cases.open_case(index, "../etc")
