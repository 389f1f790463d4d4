"""Parsing Qwen grounding answers into normalised boxes, and coordinate round trips.

The table holds answers shaped like real Qwen2.5-VL/Qwen3-VL outputs (fenced, prose-wrapped,
single-quoted, truncated, points, wrappers, garbage). Each row asserts the exact boxes and how
many warnings came back: one per dropped or repaired item, never a silent drop.
"""

from __future__ import annotations

import random
import time

import pytest

from chord_core.analysis.grounding import (
    POINT_BOX_SIZE,
    ParsedBox,
    denormalise,
    normalise_px,
    parse_boxes,
    to_detection,
)

WH = (640, 480)  # model input size: x / 640, y / 480
DOG = '{"bbox_2d": [64, 48, 320, 240], "label": "dog"}'
CAT = '{"bbox_2d": [320, 240, 640, 480], "label": "cat"}'
DOG_BOX = ((0.1, 0.1, 0.5, 0.5), "dog", "box")
CAT_BOX = ((0.5, 0.5, 1.0, 1.0), "cat", "box")
H = POINT_BOX_SIZE / 2

CASES = [
    # id, text, coords, expected [(bbox, label, kind)], warnings
    ("plain-json", f"[{DOG}]", "absolute", [DOG_BOX], 0),
    ("json-fence", f"```json\n[\n    {DOG}\n]\n```", "absolute", [DOG_BOX], 0),
    ("fence-no-lang-inline", f"```[{DOG}]```", "absolute", [DOG_BOX], 0),
    ("fence-then-im-end", f"```json\n[\n\t{DOG}\n]\n```<|im_end|>", "absolute", [DOG_BOX], 0),
    ("two-fences", f"```json\n[{DOG}]\n```\nAlso:\n```json\n[{CAT}]\n```", "absolute",
     [DOG_BOX, CAT_BOX], 0),
    ("prose-before-after", f"Sure! The dog is here: [{DOG}]. It's sitting (see [above]).",
     "absolute", [DOG_BOX], 0),
    ("prose-with-number-in-brackets", f"I found [1] dog:\n```json\n[{DOG}]\n```", "absolute",
     [DOG_BOX], 0),
    ("single-quoted", "[{'bbox_2d': [64, 48, 320, 240], 'label': 'dog'}]", "absolute",
     [DOG_BOX], 0),
    ("single-quoted-apostrophe-label", "[{'bbox_2d': [64, 48, 320, 240], 'label': \"dog's toy\"}]",
     "absolute", [((0.1, 0.1, 0.5, 0.5), "dog's toy", "box")], 0),
    ("trailing-comma", f"[{DOG},]", "absolute", [DOG_BOX], 0),
    ("several-objects", f"```json\n[{DOG}, {CAT}, "
     '{"bbox_2d": [0, 0, 64, 48], "label": "ball"}]\n```', "absolute",
     [DOG_BOX, CAT_BOX, ((0.0, 0.0, 0.1, 0.1), "ball", "box")], 0),
    ("truncated-mid-object", f'```json\n[{DOG}, {{"bbox_2d": [320, 240, 6', "absolute",
     [DOG_BOX], 1),
    ("truncated-mid-label", f'[{DOG}, {{"bbox_2d": [320, 240, 640, 480], "label": "ca',
     "absolute", [DOG_BOX], 1),
    ("truncated-mid-number-first", '[{"bbox_2d": [64, 4', "absolute", [], 1),
    ("truncated-between-items", f"```json\n[{DOG},\n", "absolute", [DOG_BOX], 1),
    ("truncated-nested", f'{{"objects": [{DOG}, {{"bbox_2d": [1, ', "absolute", [DOG_BOX], 1),
    ("nested-objects", f'{{"objects": [{DOG}, {CAT}]}}', "absolute", [DOG_BOX, CAT_BOX], 0),
    ("single-object-not-in-list", DOG, "absolute", [DOG_BOX], 0),
    ("point-2d", '[{"point_2d": [320, 240], "label": "dog"}]', "absolute",
     [((0.5 - H, 0.5 - H, 0.5 + H, 0.5 + H), "dog", "point")], 0),
    ("point-at-corner", '[{"point_2d": [0, 480], "label": "dog"}]', "absolute",
     [((0.0, 1.0 - H, H, 1.0), "dog", "point")], 0),
    ("point-out-of-range", '[{"point_2d": [700, 240], "label": "dog"}]', "absolute",
     [((1.0 - H, 0.5 - H, 1.0, 0.5 + H), "dog", "point")], 1),
    ("out-of-range-clipped", '[{"bbox_2d": [-10, 48, 700, 240], "label": "dog"}]', "absolute",
     [((0.0, 0.1, 1.0, 0.5), "dog", "box")], 1),
    ("swapped-corners", '[{"bbox_2d": [320, 240, 64, 48], "label": "dog"}]', "absolute",
     [DOG_BOX], 1),
    ("swapped-and-clipped-one-warning", '[{"bbox_2d": [700, 240, 64, 48], "label": "dog"}]',
     "absolute", [((0.1, 0.1, 1.0, 0.5), "dog", "box")], 1),
    ("zero-area", f'[{{"bbox_2d": [64, 48, 64, 240], "label": "dog"}}, {CAT}]', "absolute",
     [CAT_BOX], 1),
    ("entirely-outside", '[{"bbox_2d": [700, 500, 800, 600], "label": "dog"}]', "absolute",
     [], 1),
    ("nan-coordinate", f'[{{"bbox_2d": [NaN, 48, 320, 240], "label": "dog"}}, {CAT}]',
     "absolute", [CAT_BOX], 1),
    ("string-garbage-coordinate", '[{"bbox_2d": ["left", 48, 320, 240], "label": "dog"}]',
     "absolute", [], 1),
    ("numeric-strings-repaired", '[{"bbox_2d": ["64", "48", "320", "240"], "label": "dog"}]',
     "absolute", [DOG_BOX], 1),
    ("three-coordinates", '[{"bbox_2d": [64, 48, 320], "label": "dog"}]', "absolute", [], 1),
    ("corner-pairs-flattened", '[{"bbox_2d": [[64, 48], [320, 240]], "label": "dog"}]',
     "absolute", [DOG_BOX], 1),
    ("missing-bbox-key", f'[{{"label": "dog"}}, {CAT}]', "absolute", [CAT_BOX], 1),
    ("non-object-item", f'["dog", {CAT}]', "absolute", [CAT_BOX], 1),
    ("missing-label-gets-default", '[{"bbox_2d": [64, 48, 320, 240]}]', "absolute",
     [((0.1, 0.1, 0.5, 0.5), "query", "box")], 0),
    ("numeric-label", '[{"bbox_2d": [64, 48, 320, 240], "label": 3}]', "absolute",
     [((0.1, 0.1, 0.5, 0.5), "3", "box")], 0),
    ("label-with-braces", '[{"bbox_2d": [64, 48, 320, 240], "label": "dog {big] }"}]',
     "absolute", [((0.1, 0.1, 0.5, 0.5), "dog {big] }", "box")], 0),
    ("bare-coordinate-list", "[64, 48, 320, 240]", "absolute",
     [((0.1, 0.1, 0.5, 0.5), "query", "box")], 0),
    ("unquoted-keys-by-pattern", "[{bbox_2d: [64, 48, 320, 240], label: dog}]", "absolute",
     [DOG_BOX], 1),
    ("empty-list", "[]", "absolute", [], 0),
    ("empty-list-fenced", "```json\n[]\n```", "absolute", [], 0),
    ("empty-wrapper", '{"objects": []}', "absolute", [], 0),
    ("empty-string", "", "absolute", [], 0),
    ("whitespace", "\n  \n", "absolute", [], 0),
    ("not-present-prose", "There is no dog in this image.", "absolute", [], 0),
    ("garbage-prose", "the quick brown fox jumps over the lazy dog", "absolute", [], 0),
    ("garbage-brackets", "{{[[ ]] nope", "absolute", [], 1),
    ("json-fence-not-json", "```json\nnot valid json\n```", "absolute", [], 1),
    ("wrapper-without-boxes", '{"answer": "a dog"}', "absolute", [], 1),
    ("relative1000", '[{"bbox_2d": [100, 200, 500, 1000], "label": "dog"}]', "relative1000",
     [((0.1, 0.2, 0.5, 1.0), "dog", "box")], 0),
    ("relative1000-out-of-range", '[{"bbox_2d": [100, 200, 1200, 900], "label": "dog"}]',
     "relative1000", [((0.1, 0.2, 1.0, 0.9), "dog", "box")], 1),
    ("relative1000-point", '[{"point_2d": [500, 250], "label": "dog"}]', "relative1000",
     [((0.5 - H, 0.25 - H, 0.5 + H, 0.25 + H), "dog", "point")], 0),
]


@pytest.mark.parametrize("text, coords, expected, n_warnings", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_parse_table(text: str, coords: str, expected: list, n_warnings: int) -> None:
    result = parse_boxes(text, WH, coords=coords, default_label="query")
    got = [(b.bbox, b.label, b.kind) for b in result.boxes]
    assert len(got) == len(expected), (got, result.warnings)
    for (bbox, label, kind), (ebbox, elabel, ekind) in zip(got, expected):
        assert bbox == pytest.approx(ebbox, abs=1e-9)
        assert (label, kind) == (elabel, ekind)
    assert len(result.warnings) == n_warnings, result.warnings
    assert all(isinstance(w, str) and w for w in result.warnings)


def test_relative1000_ignores_input_size() -> None:
    text = '[{"bbox_2d": [100, 200, 500, 1000], "label": "dog"}]'
    a = parse_boxes(text, (640, 480), coords="relative1000")
    b = parse_boxes(text, (1288, 728), coords="relative1000")
    assert a.boxes == b.boxes


def test_absolute_uses_input_size() -> None:
    text = '[{"bbox_2d": [64, 48, 320, 240], "label": "dog"}]'
    assert parse_boxes(text, (1280, 960)).boxes[0].bbox == pytest.approx((0.05, 0.05, 0.25, 0.25))


@pytest.mark.parametrize("coords, input_wh", [("pixels", (640, 480)), ("absolute", (0, 480)),
                                              ("absolute", (640, -1))],
                         ids=["unknown-mode", "zero-width", "negative-height"])
def test_bad_arguments_raise(coords: str, input_wh: tuple[int, int]) -> None:
    """Our own arguments are checked (model text never raises, our bugs do)."""
    with pytest.raises(ValueError):
        parse_boxes("[]", input_wh, coords=coords)


def test_warning_names_the_item() -> None:
    result = parse_boxes('[{"bbox_2d": [320, 240, 64, 48], "label": "dog"}]', WH)
    assert "item 1" in result.warnings[0] and "dog" in result.warnings[0]
    assert "swapped" in result.warnings[0]


def test_truncation_warning_names_the_fixed_limit() -> None:
    """Grounding answers are capped per frame whatever the slider says: the note names that
    limit and gives no advice to raise max new tokens (nobody could follow it)."""
    result = parse_boxes(f"[{DOG}, {{\"bbox_2d\": [1", WH)
    assert "cut off at the per-frame length limit" in result.warnings[0]
    assert "max new tokens" not in result.warnings[0]


FULL = f"```json\n[\n  {DOG},\n  {CAT},\n  " '{"point_2d": [320, 240], "label": "dog"}\n]\n```'


@pytest.mark.parametrize("cut", range(0, len(FULL) + 1))
def test_every_truncation_keeps_complete_items_and_warns(cut: int) -> None:
    """Any prefix of a real answer: never raises, keeps exactly the complete items, and warns
    once while the list is open."""
    full = parse_boxes(FULL, WH).boxes
    prefix = FULL[:cut]
    result = parse_boxes(prefix, WH)
    assert result.boxes == full[: len(result.boxes)]
    list_open = FULL.index("[") < cut <= FULL.rindex("]")
    assert len(result.warnings) == (1 if list_open else 0), (prefix, result.warnings)
    complete = prefix.count("}")  # labels hold no braces here
    assert len(result.boxes) == (3 if cut > FULL.rindex("]") else complete)


def test_fuzz_never_raises() -> None:
    rng = random.Random(0)
    alphabet = list("[]{}\"',:0123456789.-e abcbbox_2dpoint_2dlabel`\n") + ["NaN", "```json"]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        result = parse_boxes(text, WH)
        for box in result.boxes:
            x1, y1, x2, y2 = box.bbox
            assert 0.0 <= x1 < x2 <= 1.0 and 0.0 <= y1 < y2 <= 1.0


PATHOLOGICAL = {
    "open-braces": "{" * 8000,
    "open-brackets": "[" * 8000,
    "deep-closed-lists": "[" * 5000 + "]" * 5000,
    "deep-closed-objects": '{"a":' * 3000 + "1" + "}" * 3000,
    "repeated-cut-box": '{"bbox_2d": [' * 2000,
    "quotes": "'" * 8000 + "[",
    "backslashes": '["\\' * 3000,
}


@pytest.mark.parametrize("text", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_pathological_text_is_fast_and_safe(text: str) -> None:
    """Random-weight models emit long bracket soups: no recursion error, no quadratic time."""
    start = time.perf_counter()
    result = parse_boxes(text, WH)
    assert result.boxes == []
    assert time.perf_counter() - start < 1.0


def test_many_objects_cut_off() -> None:
    text = "[" + ", ".join([DOG] * 500) + ', {"bbox_2d": [1, 2'
    result = parse_boxes(text, WH)
    assert len(result.boxes) == 500 and len(result.warnings) == 1


# ── coordinates ──────────────────────────────────────────────────────────────────────────────

SIZES = [(1920, 1080), (1080, 1920), (641, 479), (1, 1), (3, 1001)]


@pytest.mark.parametrize("wh", SIZES, ids=["landscape", "portrait", "odd", "one-px", "thin"])
def test_px_round_trip_is_exact(wh: tuple[int, int]) -> None:
    rng = random.Random(wh[0] * 7 + wh[1])
    w, h = wh
    for _ in range(300):
        xs = sorted(rng.randint(0, w) for _ in range(2))
        ys = sorted(rng.randint(0, h) for _ in range(2))
        px = (xs[0], ys[0], xs[1], ys[1])
        assert denormalise(normalise_px(px, wh), wh) == px


@pytest.mark.parametrize(
    "input_wh, original_wh",
    [((644, 364), (1920, 1080)), ((364, 644), (1080, 1920)), ((336, 252), (641, 479)),
     ((1288, 728), (1280, 720))],
    ids=["landscape-hd", "portrait-hd", "odd-original", "upscaled-input"])
def test_input_to_original_within_one_px(input_wh: tuple[int, int],
                                         original_wh: tuple[int, int]) -> None:
    """A box in model-input pixels lands within 1 px of the same place on the original."""
    rng = random.Random(sum(input_wh))
    iw, ih = input_wh
    ow, oh = original_wh
    for _ in range(200):
        xs = sorted(rng.sample(range(iw + 1), 2))
        ys = sorted(rng.sample(range(ih + 1), 2))
        text = f'[{{"bbox_2d": [{xs[0]}, {ys[0]}, {xs[1]}, {ys[1]}], "label": "x"}}]'
        (box,) = parse_boxes(text, input_wh).boxes
        det = to_detection(box, original_wh, t_s=1.5, frame_index=45)
        expect = (xs[0] * ow / iw, ys[0] * oh / ih, xs[1] * ow / iw, ys[1] * oh / ih)
        assert all(abs(a - b) <= 1.0 for a, b in zip(det.bbox_px, expect)), (det, expect)
        assert det.bbox == box.bbox
        assert (det.t_s, det.frame_index, det.label, det.track_id) == (1.5, 45, "x", -1)


def test_to_detection_clips_to_frame() -> None:
    det = to_detection(ParsedBox((0.0, 0.0, 1.0, 1.0)), (641, 479), t_s=0.0, frame_index=0)
    assert det.bbox_px == (0, 0, 641, 479)


def test_denormalise_clips_out_of_range() -> None:
    assert denormalise((-0.1, -0.5, 1.2, 1.0), (100, 50)) == (0, 0, 100, 50)


@pytest.mark.parametrize("text, labels, n_warnings", [
    # one complete object naming two boxes (QwenLM/Qwen3-VL#1720's prompt, not cut off)
    ('{"object_name": "cup", "bbox": [1, 2, 30, 40], "object_name": "pen", '
     '"bbox": [50, 60, 70, 80]}', ["cup", "pen"], 0),
    ('{"label": "a", "label": "b", "bbox_2d": [1, 2, 30, 40]}', ["b"], 0),  # last label wins
    ('[{"bbox_2d": [1, 2, 30, 40], "names": {"zh": "猫", "en": "Cat"}}]', ["Cat"], 0),
    ('[{"bbox_2d": [1, 2, 30, 40], "names": {"zh": "猫"}}]', ["猫"], 0),
    ('[{"bbox_2d": [1, 2, 30, 40], "text_content": "EXIT"}]', ["EXIT"], 0),
    ('[{"bbox_2d": [1, 2, 30, 40], "label": "a"}, {"bbox_2d": [5, 6, 7, 8], "label": "b', ["a"],
     1),  # a cut item with a complete box is still dropped: its label is unfinished
], ids=["repeated-keys", "repeated-label", "names-en", "names-zh", "text-content", "cut-label"])
def test_label_keys_and_repeated_keys(text: str, labels: list[str], n_warnings: int) -> None:
    res = parse_boxes(text, (100, 100), coords="relative1000", default_label="query")
    assert [b.label for b in res.boxes] == labels
    assert len(res.warnings) == n_warnings, res.warnings
