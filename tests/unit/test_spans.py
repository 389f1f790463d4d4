"""Time spans from model answers (two-pass grounding's first pass): every shape the model may
answer in, garbage and truncation, a warning for everything dropped or changed, and the
choice of frames inside the spans."""

from __future__ import annotations

import numpy as np
import pytest

from chord_core.analysis.spans import frames_in_spans, parse_spans, parse_time

CASES = [  # (answer, spans, number of warnings, answered_none)
    ('```json\n[{"start": 1.0, "end": 4.5}, {"start": 6, "end": 7.5}]\n```',
     [(1.0, 4.5), (6.0, 7.5)], 0, False),
    ("[{'start_time': '0:02', 'end_time': '0:03.5'}]", [(2.0, 3.5)], 0, False),
    ('{"time": [2.5, 3.0]}', [(2.5, 3.0)], 0, False),
    ('{"start": 1, "end": 2} and {"start": 5, "end": 6}', [(1.0, 2.0), (5.0, 6.0)], 0, False),
    ("[1.5, 2.5]", [(1.5, 2.5)], 0, False),
    ('[{"start": "3s", "end": "4.5 seconds"}]', [(3.0, 4.5)], 0, False),
    ("[[1, 2], [5, 3]]", [(1.0, 2.0), (3.0, 5.0)], 1, False),            # reversed: swapped
    ('[{"start": 1, "end": 3}, {"start": 2, "end": 4}]', [(1.0, 4.0)], 0, False),  # merged
    ("The dog shows from 2.0s to 4.5s and again 8 - 9 seconds.", [(2.0, 4.5), (8.0, 9.0)], 0,
     False),
    ("It appears between 00:01:02 and 00:01:05.", [(62.0, 64.0)], 1, False),  # clipped at 64
    ('[{"start": 1.0, "end": 4.5}, {"foo": 1}, {"start": "abc"}, {"start": 99, "end": 100}]',
     [(1.0, 4.5)], 3, False),
    ('[{"start": 1.0, "end": 4.5}, {"start": 3', [(1.0, 4.5)], 1, False),  # cut off
    ('[{"start": -2, "end": 1}]', [], 2, False),
    ("[]", [], 0, True),
    ("The target never appears in this video.", [], 0, True),
    ("lorem ipsum dolor", [], 1, False),
    ("", [], 0, False),
    # issue 31: JSON that holds no span, then the prose reader; event keys; a lone moment
    ('{"answer": "from 2s to 4s"}', [(2.0, 4.0)], 1, False),
    ('{"00:23.00 - 00:48.00": "trim", "00:50": "serve"}', [(23.0, 48.0), (49.5, 50.5)], 1,
     False),
    ("窗户在第3.5秒出现", [(3.0, 4.0)], 1, False),
    ("In this 10 second clip the dog never appears.", [], 0, True),
]


@pytest.mark.parametrize("answer, spans, n_warnings, none", CASES,
                         ids=[f"case{i}" for i in range(len(CASES))])
def test_parse_spans(answer: str, spans: list, n_warnings: int, none: bool) -> None:
    parsed = parse_spans(answer, duration_s=64.0)
    assert list(parsed.spans) == spans
    assert len(parsed.warnings) == n_warnings, parsed.warnings
    assert parsed.answered_none is none
    assert parsed.usable is (bool(spans) or none)


@pytest.mark.parametrize("value, seconds", [
    (3, 3.0), (2.5, 2.5), ("4.5s", 4.5), ("0:03.5", 3.5), ("01:02:03", 3723.0),
    ("soon", None), (True, None), (float("nan"), None), (None, None),
])
def test_parse_time(value, seconds) -> None:
    assert parse_time(value) == seconds


@pytest.mark.parametrize("spans, margin, want", [
    ([(1.2, 1.3)], 0.25, [2, 3]),           # a short span: frames within the margin
    ([(1.21, 1.22)], 0.0, [2]),             # too short to hold a frame: the nearest one
    ([(0.0, 0.5), (2.9, 9.0)], 0.0, [0, 1, 6]),
    ([], 1.0, []),
], ids=["margin", "nearest", "two-spans", "none"])
def test_frames_in_spans(spans, margin, want) -> None:
    times = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert frames_in_spans(times, spans, margin) == want


class _VideoProcessor:
    patch_size, merge_size = 16, 2


class _Processor:
    video_processor = _VideoProcessor()


class _Model:
    processor = _Processor()


@pytest.mark.parametrize("n, budget, want_n, want_hw", [
    (8, 10_000, 8, (256, 448)),   # fits: untouched
    (8, 100, 8, (96, 192)),       # scaled down to fit
    (200, 100, 50, (64, 64)),     # at the 2×2-token floor: thinned evenly
], ids=["fits", "scaled", "thinned"])
def test_span_frames_fit_the_token_budget(n, budget, want_n, want_hw) -> None:
    from chord_core.analysis.two_pass import span_frames

    frames = np.zeros((n, 256, 448, 3), np.uint8)
    small, keep = span_frames(_Model(), frames, budget)
    assert small.shape[0] == len(keep) == want_n and small.shape[1:3] == want_hw
    assert keep == sorted(keep) and keep[0] == 0
