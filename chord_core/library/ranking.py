"""Ranking a search's matches: Okapi BM25 over the matching passages of the search's window
(all of up to RANK_WINDOW matches, else the newest COMMON_WINDOW: search.py), computed
here, and the snippet with the matched words marked.

Why not FTS5's own ``bm25()``: it counts, for every query, the rows each term occurs in by
walking the term's whole document list, so a word in 14 % of a million passages cost most
of a second per search on this 2-core machine (measured: p50 662 ms, p99 3.1 s at 1M
passages, docs/benchmarks.md). Here the document frequencies are counted up to a cap and
estimated past it (``search.doc_freq``), the match list is walked newest-first (rowid order, no scoring)
only as far as the window, and the window's passages are scored in Python: the cost of a
search no longer grows with the library.

Tokens are lower-cased runs of word characters with accents removed, as FTS5's
``unicode61 remove_diacritics 2`` tokenizer makes them (close enough for term frequencies;
the match itself is FTS5's).
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any, Sequence

K1, B = 1.2, 0.75
WEIGHTS = (1.0, 0.4)  # text, place (file name and folder)
SNIPPET_TOKENS = 24
_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokens(text: str) -> list[str]:
    """The text's tokens, as the index's tokenizer makes them (approximately)."""
    if text.isascii():  # most text: no accents to remove (measured: 5× faster)
        return _TOKEN.findall(text.lower())
    folded = unicodedata.normalize("NFKD", text.lower())
    return _TOKEN.findall("".join(c for c in folded if not unicodedata.combining(c)))


_INDEX_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def index_tokens(text: str) -> list[str]:
    """The text's tokens as FTS5's ``unicode61`` makes them for plain words: ``tokens``
    but split at ``_`` too (a separator there, so ``fence_cam2`` is ``fence`` and
    ``cam2``). Used to check a word on a passage (search.py), not for term frequencies."""
    if not text.isascii():
        text = " ".join(tokens(text))
    return _INDEX_TOKEN.findall(text.lower())


def bm25(rows: Sequence[Any], terms: Sequence[str], doc_freq: dict[str, int],
         total: int, avg_len: tuple[float, float]) -> list[tuple[float, Any]]:
    """(score, row) best first; a row has ``text`` and ``place``. Higher is better.
    A field's score is computed once per distinct text (a clip's passages share their
    place), with the per-field constants hoisted (measured: 950 rows 9.5 → 6 ms)."""
    wanted = [tokens(t)[0] if tokens(t) else t for t in terms]
    idf = [(t, math.log(1 + (total - doc_freq.get(t, 0) + 0.5) / (doc_freq.get(t, 0) + 0.5)))
           for t in dict.fromkeys(wanted)]
    fields: list[tuple[str, float, float, float, dict[str, float]]] = [
        (name, weight, K1 * (1 - B), K1 * B / max(avg, 1.0), {})
        for name, weight, avg in zip(("text", "place"), WEIGHTS, avg_len)]
    scored = []
    for row in rows:
        score = 0.0
        for name, weight, fixed, per_token, seen in fields:
            text = row[name] or ""
            part = seen.get(text)
            if part is None:
                words = tokens(text)
                norm = fixed + per_token * (len(words) or 1)
                part = 0.0
                for term, weight_idf in idf:
                    tf = words.count(term)
                    if tf:
                        part += weight_idf * tf * (K1 + 1) / (tf + norm)
                part = seen[text] = weight * part
            score += part
        scored.append((score, row))
    # ties (equal up to float rounding) in index order
    scored.sort(key=lambda sr: (-round(sr[0], 9), int(sr[1]["rowid"])))
    return scored


def snippet(text: str, terms: Sequence[str]) -> list[list[Any]]:
    """``[[piece, matched], …]`` around the first matched word, at most SNIPPET_TOKENS words,
    with "…" where the text was cut."""
    wanted = {tokens(t)[0] if tokens(t) else t for t in terms}
    spans = [(m.start(), m.end(), _fold(m.group()) in wanted) for m in _TOKEN.finditer(text)]
    if not spans:
        return [[text, False]] if text else []
    first = next((i for i, s in enumerate(spans) if s[2]), 0)
    lo = max(0, min(first - SNIPPET_TOKENS // 4, len(spans) - SNIPPET_TOKENS))
    hi = min(len(spans), lo + SNIPPET_TOKENS)
    start, end = spans[lo][0] if lo else 0, spans[hi - 1][1] if hi < len(spans) else len(text)
    parts: list[list[Any]] = [["…", False]] if lo else []
    at = start
    for a, b, hit in spans[lo:hi]:
        if hit:
            if a > at:
                parts.append([text[at:a], False])
            parts.append([text[a:b], True])
            at = b
    if end > at:
        parts.append([text[at:end], False])
    if hi < len(spans):
        parts.append(["…", False])
    return parts


def _fold(word: str) -> str:
    folded = tokens(word)
    return folded[0] if folded else word.lower()
