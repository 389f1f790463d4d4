"""Searching the library: words in, ranked hits out (``chord.library-search/v1``).

A query is words, not FTS5 syntax: each word is quoted (so ``-``, ``"``, ``NEAR`` or ``*``
typed by a user can never be a syntax error or an operator), all words must match; when no
passage has all of them, passages with any of them are ranked instead (the answer says
``matched: "any"``). Ranked by BM25 (text weighted over the file name and folder; computed
in ranking.py, not by FTS5); a query matching more than RANK_WINDOW passages ranks the
newest COMMON_WINDOW of them (``ranked`` says which).
Filters: folder (the folder or below it), date (the day the result was made, UTC), task —
each an index term, so a filter makes a search cheaper, never dearer.

A hit: the clip (path, name, folder), the time range, the passage's kind and text with the
matched words marked (``snippet``, ``[`` ``]`` around each; ``parts``, the same as
``[[text, matched], …]`` for clients that render it), the job or run that made it, a
``thumbnail_s`` (the moment to show: the range's middle) and the score (lower is better, as
BM25, higher is better: ranking.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from chord_core.errors import InputError
from chord_core.library.index import LibraryIndex
from chord_core.library.passages import folder_token

SEARCH_SCHEMA = "chord.library-search/v1"
MAX_QUERY_CHARS = 200
MAX_TERMS = 12
MAX_LIMIT = 100
TASKS = ("describe", "ground", "entail", "chapters")
_WORD = re.compile(r"\w+", re.UNICODE)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class Filters:
    """What narrows a search; every field optional."""

    folder: str = ""
    date_from: str = ""  # YYYY-MM-DD, inclusive
    date_to: str = ""
    task: str = ""

    def check(self) -> Filters:
        for name in ("date_from", "date_to"):
            value = getattr(self, name)
            if value and not _DAY.match(value):
                raise InputError(f"{name} {value!r} is not a date",
                                 hint="give dates as YYYY-MM-DD, e.g. 2026-12-01")
        if self.task and self.task not in TASKS:
            raise InputError(f"unknown task {self.task!r}",
                             hint=f"filter by one of: {', '.join(TASKS)}")
        if len(self.folder) > 4096:
            raise InputError("the folder filter is too long", hint="give a folder path")
        return self

    def tokens(self) -> str:
        """The filters as an FTS5 expression over the ``tags`` column ("" for none): a
        folder is one token, a date range the fewest year/month/day tokens covering it."""
        parts = []
        if self.folder:
            parts.append(f'tags : "{folder_token(self.folder)}"')
        if self.date_from or self.date_to:
            lo = date.fromisoformat(self.date_from) if self.date_from else date(1970, 1, 1)
            hi = date.fromisoformat(self.date_to) if self.date_to else date(2100, 12, 31)
            cover = date_tokens(lo, hi) or ["d00000000"]  # an empty range matches nothing
            parts.append("tags : (" + " OR ".join(f'"{t}"' for t in cover) + ")")
        if self.task:
            parts.append(f'tags : "t{self.task}"')
        return " AND ".join(parts)


def date_tokens(lo: date, hi: date) -> list[str]:
    """The fewest ``y2026`` / ``m202612`` / ``d20261201`` tokens covering lo..hi."""
    out: list[str] = []
    day = lo
    while day <= hi:
        year_end, month_end = date(day.year, 12, 31), _month_end(day)
        if day.month == 1 and day.day == 1 and year_end <= hi:
            out.append(f"y{day.year}")
            day = year_end + timedelta(days=1)
        elif day.day == 1 and month_end <= hi:
            out.append(f"m{day.year}{day.month:02d}")
            day = month_end + timedelta(days=1)
        else:
            out.append(f"d{day:%Y%m%d}")
            day += timedelta(days=1)
    return out


def _month_end(day: date) -> date:
    first_next = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return first_next - timedelta(days=1)


def query_terms(q: str) -> list[str]:
    """The words of a query, checked: not empty, not too long."""
    q = q or ""
    if len(q) > MAX_QUERY_CHARS:
        raise InputError(f"the query is {len(q)} characters; the most is {MAX_QUERY_CHARS}",
                         hint="search with a few words, e.g. 'person climbs fence'")
    terms = _WORD.findall(q.lower())
    if not terms:
        raise InputError("the query has no words to search for",
                         hint="type a word the results may contain, e.g. 'forklift'")
    return list(dict.fromkeys(terms))[:MAX_TERMS]


def _match(terms: list[str], op: str) -> str:
    return f" {op} ".join(f'"{t}"' for t in terms)


def check_limit(limit: int) -> int:
    if not 1 <= int(limit) <= MAX_LIMIT:
        raise InputError(f"limit must be 1–{MAX_LIMIT}, got {limit}",
                         hint=f"ask for at most {MAX_LIMIT} hits per search")
    return int(limit)


# Every match is ranked when at most RANK_WINDOW match; past that (a very common word, or
# a filter alone) only the newest COMMON_WINDOW are: reading and scoring a passage's text is
# most of a search's cost, and for a word in tens of thousands of passages the newest few
# hundred rank as well as a thousand (measured at 1M passages, docs/benchmarks.md: CPU p99
# 45 → 26 ms). The answer's ``ranked`` says which.
RANK_WINDOW = 1000
COMMON_WINDOW = 300
_META = ("SELECT id, source, kind, task, video_path, folder, name, t0, t1, made_at, day, "
         "model, verdict, found FROM library_passages WHERE id IN ({marks})")


def _window(index: LibraryIndex, match: str) -> tuple[list[Any], int]:
    """The matches to rank (their text) and how many were looked at (RANK_WINDOW + 1 at
    most): the newest rowids first, no text read (FTS5 walks its list in rowid order), then
    the text of the ones ranked, one rowid seek each."""
    ids = [int(r[0]) for r in index.read(
        "SELECT rowid FROM library_fts WHERE library_fts MATCH ? ORDER BY rowid DESC "
        "LIMIT ?", (match, RANK_WINDOW + 1))]
    keep = ids if len(ids) <= RANK_WINDOW else ids[:min(COMMON_WINDOW, RANK_WINDOW)]
    rows: list[Any] = []
    for lo in range(0, len(keep), 500):  # SQLite's bound parameters: well under its limit
        part = keep[lo:lo + 500]
        rows += index.read("SELECT rowid, text, place FROM library_fts WHERE rowid IN "
                           f"({','.join('?' * len(part))}) ORDER BY rowid DESC", part)
    return rows, len(ids)


DF_CAP = 1000


def doc_freq(index: LibraryIndex, term: str, total: int) -> int:
    """Passages holding ``term``: counted up to DF_CAP (newest first), past that estimated
    from how densely the newest DF_CAP occur (their rowid span). Bounded work per term: an
    exact count walks the term's whole document list (what FTS5's bm25() and its
    vocabulary table do, and what made a common word cost most of a second at 1M)."""
    rows = index.read("SELECT rowid FROM library_fts WHERE library_fts MATCH ? "
                      "ORDER BY rowid DESC LIMIT ?", (f'"{term}"', DF_CAP))
    if len(rows) < DF_CAP:
        return len(rows)
    span = max(1, total - int(rows[-1][0]) + 1)
    return min(total, round(DF_CAP * total / span))


def _term_stats(index: LibraryIndex, terms: list[str]) -> tuple[int, Any, dict[str, int]]:
    """Passages in all, average field lengths, and each query word's document frequency."""
    from chord_core.library.ranking import tokens

    total, avg = index.totals()
    return total, avg, {t: doc_freq(index, t, total) for t in
                        dict.fromkeys((tokens(t) or [t])[0] for t in terms)}


def _ranked(index: LibraryIndex, terms: list[str], rows: list[Any], limit: int,
            stats: tuple[int, Any, dict[str, int]]) -> list[dict[str, Any]]:
    """The best ``limit`` of ``rows`` by BM25, with their passage rows and snippets."""
    from chord_core.library.ranking import bm25, snippet, tokens

    folded = [(tokens(t) or [t])[0] for t in terms]
    total, avg, freq = stats
    best = bm25(rows, terms, freq, total, avg)[:limit]
    if not best:
        return []
    ids = [int(r["rowid"]) for _, r in best]
    meta = {int(m["id"]): dict(m) for m in index.read(
        _META.format(marks=",".join("?" * len(ids))), ids)}
    return [{**meta[int(r["rowid"])], "score": score, "parts": snippet(r["text"], folded)}
            for score, r in best if int(r["rowid"]) in meta]


def search(index: LibraryIndex, q: str, *, filters: Filters | None = None, limit: int = 20,
           sync: bool = True) -> dict[str, Any]:
    """Ranked hits for ``q`` (see the module docstring). ``sync`` first indexes what the
    store saved since the last search. The words go to FTS5 rarest first: its AND then
    steps the long lists of common words by the short one's rowids (measured: a three-word
    query with a word in 75 % of 1M passages, 20 → 16 ms)."""
    from chord_core.library.ranking import tokens

    terms, limit = query_terms(q), check_limit(limit)
    filters = (filters or Filters()).check()
    if sync:
        index.sync()
    stats = _term_stats(index, terms)
    ordered = sorted(terms, key=lambda t: stats[2].get((tokens(t) or [t])[0], 0))
    narrow = filters.tokens()
    matched, window, seen = "all", [], 0
    for op in ("AND", "OR") if len(terms) > 1 else ("AND",):
        window, seen = _window(index, f"({_match(ordered, op)})" +
                               (f" AND {narrow}" if narrow else ""))
        if window:
            matched = "all" if op == "AND" else "any"
            break
    rows = _ranked(index, terms, window, limit, stats)
    gone = set(index.forget_missing([r["source"] for r in rows]))
    hits = [_hit(r) for r in rows if r["source"] not in gone]
    return {"schema": SEARCH_SCHEMA, "query": q, "terms": terms, "matched": matched,
            "ranked": f"the newest {len(window)} matches" if seen > RANK_WINDOW else "all",
            "filters": {k: v for k, v in vars(filters).items() if v}, "hits": hits}


def _hit(row: dict[str, Any]) -> dict[str, Any]:
    t0, t1 = float(row["t0"]), float(row["t1"])
    parts = row["parts"]
    return {"source": row["source"], "kind": row["kind"], "task": row["task"],
            "video_path": row["video_path"], "name": row["name"], "folder": row["folder"],
            "start_s": round(t0, 3), "end_s": round(t1, 3),
            "thumbnail_s": round((t0 + t1) / 2, 3),
            "snippet": "".join(f"[{p}]" if hit else p for p, hit in parts), "parts": parts,
            "day": row["day"], "made_at": row["made_at"], "model": row["model"],
            "verdict": row["verdict"] or None, "found": bool(row["found"]),
            "score": round(float(row["score"]), 4), "checked": None}
