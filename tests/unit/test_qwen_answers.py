"""Published Qwen answers (tests/data/qwen_answers.json) through Chord's parsers, each as its
source expects it to read; the made-up strings (marked ``made_up``) are the documented formats
and edges no published answer shows. Coordinates are checked in the model's own units."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chord_core.analysis.grounding import POINT_BOX_SIZE, parse_boxes
from chord_core.analysis.spans import parse_spans

DATA = json.loads((Path(__file__).parents[1] / "data" / "qwen_answers.json")
                  .read_text(encoding="utf-8"))
ENTRIES = DATA["real"] + DATA["made_up"]
BOXES = [e for e in ENTRIES if e["kind"] == "boxes"]
SPANS = [e for e in ENTRIES if e["kind"] == "spans"]


def _ids(entries: list[dict]) -> list[str]:
    return [("made-up:" if e["made_up"] else "real:") + e["id"] for e in entries]


def _scale(entry: dict) -> tuple[float, float]:
    """The unit the answer's numbers are in: 1000 (Qwen3-VL), else the input size (unknown
    for a quoted line: its numbers are checked against a nominal 1000 × 1000 input)."""
    if entry["coords"] == "relative1000":
        return 1000.0, 1000.0
    w, h = entry["input_wh"] or (1000, 1000)
    return float(w), float(h)


def _warned(warnings: list[str] | tuple[str, ...], expected: list[str]) -> None:
    for part in expected:
        assert any(part in w for w in warnings), (part, warnings)


@pytest.mark.parametrize("entry", BOXES, ids=_ids(BOXES))
def test_boxes_read_as_the_source_expects(entry: dict) -> None:
    sx, sy = _scale(entry)
    res = parse_boxes(entry["text"], (int(sx), int(sy)), coords=entry["coords"],
                      thinking=entry.get("thinking", False))
    want = entry["expect"]
    assert [b.label for b in res.boxes] == want["labels"], res.warnings
    if "first_box" in want:
        x1, y1, x2, y2 = want["first_box"]
        assert res.boxes[0].bbox == pytest.approx(
            (x1 / sx, y1 / sy, min(1.0, x2 / sx), min(1.0, y2 / sy)))
    if "point" in want:
        box = res.boxes[0]
        assert box.kind == "point"
        assert ((box.bbox[0] + box.bbox[2]) / 2, (box.bbox[1] + box.bbox[3]) / 2) == \
            pytest.approx((want["point"][0] / sx, want["point"][1] / sy))
        assert box.bbox[2] - box.bbox[0] == pytest.approx(POINT_BOX_SIZE)
    if want["warnings"]:
        _warned(res.warnings, want["warnings"])
    else:
        assert res.warnings == [], res.warnings
    for part in want.get("not_warnings", []):
        assert not any(part in w for w in res.warnings), res.warnings
    if not res.boxes:
        assert res.warnings, "an answer that yields no box must say why"


@pytest.mark.parametrize("entry", SPANS, ids=_ids(SPANS))
def test_spans_read_as_the_source_expects(entry: dict) -> None:
    res = parse_spans(entry["text"], entry["duration_s"], thinking=entry["thinking"])
    want = entry["expect"]
    assert [list(s) for s in res.spans] == [pytest.approx(s) for s in want["spans"]], \
        res.warnings
    if want["warnings"]:
        _warned(res.warnings, want["warnings"])
    else:
        assert res.warnings == (), res.warnings


def test_every_entry_names_its_source_and_real_ones_are_kept_apart() -> None:
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids))
    for entry in DATA["real"]:
        assert entry["source"]["repo"] and entry["source"]["where"] and not entry["made_up"]
        assert not entry["id"].startswith("made-")
    assert all(e["made_up"] and e["id"].startswith("made-") for e in DATA["made_up"])


def test_docs_count_the_real_answers() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "qwen_outputs.md").read_text(encoding="utf-8")
    assert f"{len(DATA['real'])} real answers" in doc
    assert f"{len(DATA['made_up'])} made-up strings" in doc


@pytest.mark.parametrize("text, thinking, spans, warning", [
    # the same looping reasoning read as an Instruct answer: its musing becomes a "moment"
    ('<140.8 seconds> ... "a group of people walking" Wait, no', False, [(140.3, 141.3)],
     "one moment"),
    ('<140.8 seconds> ... "a group of people walking" Wait, no', True, [], "still reasoning"),
    ("<think>the dog is at 3 s", False, [], "still reasoning"),
], ids=["instruct-reads-musing", "thinking-reads-nothing", "unclosed-think-tag"])
def test_reasoning_is_never_read_as_the_answer(text: str, thinking: bool, spans: list,
                                               warning: str) -> None:
    res = parse_spans(text, None, thinking=thinking)
    assert [tuple(s) for s in res.spans] == [pytest.approx(s) for s in spans]
    _warned(res.warnings, [warning])


@pytest.mark.parametrize("text", [
    "1,2,3,4" + " " * 5000 + "x",           # a plain line with a long space run
    " " * 3000 + "\n" * 3000 + "1,2,3",     # whitespace the line reader must not rescan
    "1" + " " * 5000 + "-",                 # a time then spaces: the range reader
    "{" + '"a": 1, ' * 2000,                # a long cut-off object of pairs
    "[" + "{" * 3000 + "]" * 10,            # stray brackets
], ids=["plain-spaces", "blank-lines", "range-spaces", "long-pairs", "stray-brackets"])
def test_pathological_text_is_read_in_one_pass(text: str) -> None:
    """Inputs that made a backtracking pattern take seconds (quadratic or worse): each must
    come back (with a warning where nothing was read), never hang a worker."""
    boxes = parse_boxes(text, (100, 100))
    spans = parse_spans(text, 10.0)
    assert boxes.boxes or boxes.warnings or not text.strip().startswith(("{", "["))
    assert spans.spans == () or spans.warnings
