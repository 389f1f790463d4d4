"""BM25 as ranking.py computes it: more occurrences and shorter fields rank higher, the text
counts over the file name and folder, rarer words count more, and equal scores keep index
order (also when a field's score is reused for passages that share its text)."""

from __future__ import annotations

import math

import pytest

from chord_core.library.ranking import B, K1, bm25


def _rows(*pairs: tuple[str, str]) -> list[dict]:
    return [{"rowid": i + 1, "text": t, "place": p} for i, (t, p) in enumerate(pairs)]


@pytest.mark.parametrize("pairs, terms, best", [
    ((("a van", "x.mp4 /m"), ("a van and a van", "y.mp4 /m")), ["van"], 2),
    ((("a van parked by the long wall of the dock", "x.mp4 /m"), ("a van", "y.mp4 /m")),
     ["van"], 2),
    ((("a truck", "van.mp4 /m"), ("a van", "y.mp4 /m")), ["van"], 2),
    ((("a van", "x.mp4 /m"), ("a walrus", "y.mp4 /m")), ["van", "walrus"], 2),
], ids=["more-often", "shorter", "text-over-place", "rarer-word"])
def test_what_ranks_first(pairs, terms, best):
    freq = {"van": 500, "walrus": 3}
    ranked = bm25(_rows(*pairs), terms, freq, 1000, (6.0, 3.0))
    assert ranked[0][1]["rowid"] == best and ranked[0][0] > ranked[1][0]


def test_the_score_is_okapi_bm25_of_both_fields():
    [(score, _)] = bm25(_rows(("the van", "van.mp4 /m")), ["van"], {"van": 9}, 100,
                        (4.0, 2.0))
    idf = math.log(1 + (100 - 9 + 0.5) / (9 + 0.5))

    def field(tf: int, length: int, avg: float) -> float:
        return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avg))

    assert score == pytest.approx(1.0 * field(1, 2, 4.0) + 0.4 * field(1, 3, 2.0))


def test_equal_scores_keep_index_order_with_shared_texts():
    rows = _rows(*[("a van", "same.mp4 /m")] * 4)
    assert [r["rowid"] for _, r in bm25(rows, ["van"], {"van": 4}, 10, (2.0, 3.0))] == \
        [1, 2, 3, 4]
