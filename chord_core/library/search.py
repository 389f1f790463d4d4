"""Searching the library: words in, ranked hits out (``chord.library-search/v1``).

A query is words, not FTS5 syntax: each word is quoted (so ``-``, ``"``, ``NEAR`` or ``*``
typed by a user can never be a syntax error or an operator), all words must match; when no
passage has all of them, passages with any of them are ranked instead (the answer says
``matched: "any"``). Ranked by BM25 (text weighted over the file name and folder; computed
in ranking.py, not by FTS5); a query matching more than RANK_WINDOW passages ranks the
newest COMMON_WINDOW of them (``ranked`` says which).
Filters: folder (the folder or below it), date (the day the result was made, UTC), task —
each an index term, so a filter makes a search cheaper, never dearer. The filter tokens live
in the ``tags`` column, and the query's words are matched in the text and place columns
only (``{text place} :``), so a word never matches a filter's token (a search for
``y2026`` or ``tdescribe`` found every passage of 2026 or every description). A date is
checked before it is used: ASCII ``YYYY-MM-DD``, a real day, between MIN_DAY and MAX_DAY
(month 13, 30 February, year 0 or 9999 and other digits were a 500).

A hit: the clip (path, name, folder), the time range, the passage's kind and text with the
matched words marked (``snippet``, ``[`` ``]`` around each; ``parts``, the same as
``[[text, matched], …]`` for clients that render it), the job or run that made it, a
``thumbnail_s`` (the moment to show: the range's middle) and the score (lower is better, as
BM25, higher is better: ranking.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any, Callable

from chord_core.errors import InputError
from chord_core.library.index import LibraryIndex
from chord_core.library.passages import folder_token

SEARCH_SCHEMA = "chord.library-search/v1"
MAX_QUERY_CHARS = 200
MAX_TERMS = 12
MAX_LIMIT = 100
TASKS = ("describe", "ground", "entail", "chapters")
_WORD = re.compile(r"\w+", re.UNICODE)
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # ASCII digits only (\d takes any script's)
MIN_DAY, MAX_DAY = date(1970, 1, 1), date(2999, 12, 31)
WORD_COLUMNS = "{text place}"  # where a query's words are looked for: never ``tags``
DAY_HINT = (f"give dates as YYYY-MM-DD with ASCII digits, a real day between "
            f"{MIN_DAY:%Y-%m-%d} and {MAX_DAY:%Y-%m-%d}, e.g. 2026-12-01")


@dataclass(frozen=True)
class Filters:
    """What narrows a search; every field optional."""

    folder: str = ""
    date_from: str = ""  # YYYY-MM-DD, inclusive
    date_to: str = ""
    task: str = ""

    def check(self) -> Filters:
        for name in ("date_from", "date_to"):
            parse_day(name, getattr(self, name))
        if self.task and self.task not in TASKS:
            raise InputError(f"unknown task {self.task!r}",
                             hint=f"filter by one of: {', '.join(TASKS)}")
        if len(self.folder) > 4096:
            raise InputError("the folder filter is too long", hint="give a folder path")
        return self

    def token_sets(self) -> list[list[str]]:
        """Each filter's index tokens (a passage has one of each list)."""
        sets = []
        if self.folder:
            sets.append([folder_token(self.folder)])
        if self.date_from or self.date_to:
            lo = parse_day("date_from", self.date_from) or MIN_DAY
            # nothing is made in the future: a range past tomorrow (UTC) ends there
            hi = min(parse_day("date_to", self.date_to) or MAX_DAY,
                     datetime.now(timezone.utc).date() + timedelta(days=1))
            sets.append(date_tokens(lo, hi) or ["d00000000"])
        if self.task:
            sets.append([f"t{self.task}"])
        return sets

    def tokens(self) -> str:
        """The filters as an FTS5 expression over the ``tags`` column ("" for none): a
        folder is one token, a date range the fewest year/month/day tokens covering it (an
        empty range a day token that matches nothing)."""
        return " AND ".join("tags : (" + " OR ".join(f'"{t}"' for t in tokens) + ")"
                            for tokens in self.token_sets())


def parse_day(name: str, value: str) -> date | None:
    """``value`` (YYYY-MM-DD) as a date, None for ""; InputError with the accepted form for
    anything else (not ASCII digits, no such day, outside MIN_DAY..MAX_DAY)."""
    if not value:
        return None
    shown = value[:20]
    if not _DAY.fullmatch(value):
        raise InputError(f"{name} {shown!r} is not a date", hint=DAY_HINT)
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise InputError(f"{name} {shown!r} is no such day", hint=DAY_HINT) from None
    if not MIN_DAY <= day <= MAX_DAY:
        raise InputError(f"{name} {shown!r} is outside the dates Chord searches",
                         hint=DAY_HINT)
    return day


def date_tokens(lo: date, hi: date) -> list[str]:
    """The fewest ``y2026`` / ``m202612`` / ``d20261201`` tokens covering lo..hi."""
    out: list[str] = []
    day, hi = max(lo, MIN_DAY), min(hi, MAX_DAY)
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


# The passages' own columns (text, place, tags) read from FTS5's content table: a plain
# rowid seek, not one through the virtual table (measured at 1M passages: 857 rows 4.4 →
# 1.9 ms).
_CONTENT = ("SELECT id AS rowid, c0 AS text, c1 AS place, c2 AS tags FROM library_fts_content"
            " WHERE id IN ({marks}) ORDER BY id DESC")


def _content(conn: Any, ids: list[int]) -> list[Any]:
    rows: list[Any] = []
    for lo in range(0, len(ids), 500):  # SQLite's bound parameters: well under its limit
        part = ids[lo:lo + 500]
        rows += conn.execute(_CONTENT.format(marks=",".join("?" * len(part))), part).fetchall()
    return rows


def _window(index: LibraryIndex, match: str, check: tuple[str, ...] = ()
            ) -> tuple[list[Any], int]:
    """The matches to rank (their text) and how many were looked at (RANK_WINDOW + 1 at
    most): the newest rowids first, no text read (FTS5 walks its list in rowid order), then
    the text of the ones ranked. Words in ``check`` (very common ones, left out of
    ``match``) are checked on each match's own tokens instead: ``_checked_window``."""
    if check:
        return _checked_window(index, match, check)
    ids = [int(r[0]) for r in index.read(
        "SELECT rowid FROM library_fts WHERE library_fts MATCH ? ORDER BY rowid DESC "
        "LIMIT ?", (match, RANK_WINDOW + 1))]
    keep = ids if len(ids) <= RANK_WINDOW else ids[:min(COMMON_WINDOW, RANK_WINDOW)]
    with index.reader() as conn:
        return _content(conn, keep), len(ids)


def _checked_window(index: LibraryIndex, match: str, check: tuple[str, ...]
                    ) -> tuple[list[Any], int]:
    """``_window`` for a query with very common words: FTS5 walks the other words' matches
    newest first, 500 at a time, and a match is kept when its text or place (never tags) hold
    every word of ``check`` as FTS5 tokenises them; the walk stops past RANK_WINDOW kept.
    Why: FTS5's AND seeks a common word's list once per match of the others, and in a list
    of most passages a seek costs more than reading the passage (measured at 1M passages,
    "formula screen" + "woman" in 78 %: 14.0 ms in FTS5 against 3.5 ms for the two rare
    words, and the text read here is the text the ranking reads anyway)."""
    from chord_core.library.ranking import index_tokens

    found: list[Any] = []
    with index.reader() as conn:
        cursor = conn.execute("SELECT rowid FROM library_fts WHERE library_fts MATCH ? "
                              "ORDER BY rowid DESC", (match,))
        while len(found) <= RANK_WINDOW:
            ids = [int(r[0]) for r in cursor.fetchmany(500)]
            if not ids:
                break
            for row in _content(conn, ids):
                text = f"{row['text'] or ''} {row['place'] or ''}"  # never the tags
                if text.isascii():
                    text = text.lower()
                    if all(_has_word(text, t) for t in check):
                        found.append(row)
                elif set(check) <= set(index_tokens(text)):  # accents folded first
                    found.append(row)
        cursor.close()
    found = found[:RANK_WINDOW + 1]
    return (found if len(found) <= RANK_WINDOW else found[:min(COMMON_WINDOW, RANK_WINDOW)],
            len(found))


def _has_word(text: str, word: str) -> bool:
    """``word`` in lower-case ASCII ``text`` as a whole token (FTS5 splits plain text at
    anything but letters and digits). ``str.find``, not a regular expression: measured 500
    passages 0.35 ms against 1.5 ms."""
    at, end = text.find(word), len(word)
    while at >= 0:
        if (at == 0 or not text[at - 1].isalnum()) and \
                (at + end >= len(text) or not text[at + end].isalnum()):
            return True
        at = text.find(word, at + 1)
    return False


# A query word in at least this share of the passages is checked on the other words'
# matches rather than in FTS5's AND (``_checked_window``), when it is a plain word (ASCII
# letters and digits: tokenised here exactly as FTS5 does) and not the query's rarest.
COMMON_SHARE = 0.6
SPARSE_SHARE = 0.002
_PLAIN = re.compile(r"^[a-z0-9]+$")


def filter_share(index: LibraryIndex, filters: Filters, total: int) -> float:
    """The share of passages the filters leave (each filter's tokens counted as
    ``doc_freq`` does; 1.0 for none), for ``split_common``'s estimate."""
    share = 1.0
    for tokens in filters.token_sets():
        if len(tokens) > 3:  # a long date range: not counted (each token is a walk)
            continue
        share *= min(1.0, sum(doc_freq(index, t, total) for t in tokens) / max(total, 1))
    return share


def split_common(ordered: list[str], freq: dict[str, int], total: int,
                 share: Callable[[], float] = lambda: 1.0
                 ) -> tuple[list[str], tuple[str, ...]]:
    """The words (rarest first) for FTS5's AND, and the very common ones to check after.
    Only when the other words' matches (under the ``share()`` the filters leave) are sparse, at most
    SPARSE_SHARE of the passages expected (their shares multiplied): there FTS5 seeks far in
    the common word's list for each one. Where they are dense its seeks are short steps and
    the AND is the cheaper (measured at 1M passages: "moving" in December, 0.3 %, with
    "person": 6.6 ms in FTS5, 8 ms checked here; "child worker" in December 7 ms against
    35). Either way the same passages match."""
    total = max(total, 1)
    check = tuple(t for t in ordered[1:] if _PLAIN.match(t)
                  and freq.get(t, 0) >= COMMON_SHARE * total)
    if not check:
        return ordered, ()
    words = [t for t in ordered if t not in check]
    expected = total * share()
    for t in words:
        expected *= freq.get(t, 0) / total
    return (words, check) if expected <= SPARSE_SHARE * total else (ordered, ())


DF_CAP = 1000
# A document frequency is counted again once the index has grown or shrunk by this share
# since it was counted (an idf moves by well under 1 % then); until then it is the one
# counted before. The Library page runs its search again on every rerun of the page, and a
# library's searches share their words: measured at 1M passages, ~1 ms saved a word.
DF_STALE_SHARE = 0.01
DF_CACHE_MAX = 4096


def doc_freq(index: LibraryIndex, term: str, total: int, columns: str = "") -> int:
    """Passages holding ``term``: counted up to DF_CAP (newest first), past that estimated
    from how densely the newest DF_CAP occur (their rowid span). Bounded work per term: an
    exact count walks the term's whole document list (what FTS5's bm25() and its
    vocabulary table do, and what made a common word cost most of a second at 1M).
    Remembered on the index while its size stays within DF_STALE_SHARE. ``columns``: an
    FTS5 column filter (a query word's: WORD_COLUMNS), "" for every column."""
    cache = index.df_cache
    key = f"{columns}|{term}" if columns else term
    hit = cache.get(key)
    if hit is not None and abs(total - hit[0]) <= DF_STALE_SHARE * max(total, 1):
        return hit[1]
    rows = index.read("SELECT rowid FROM library_fts WHERE library_fts MATCH ? "
                      "ORDER BY rowid DESC LIMIT ?",
                      (f'{columns} : "{term}"' if columns else f'"{term}"', DF_CAP))
    if len(rows) < DF_CAP:
        found = len(rows)
    else:
        span = max(1, total - int(rows[-1][0]) + 1)
        found = min(total, round(DF_CAP * total / span))
    if len(cache) >= DF_CACHE_MAX:
        cache.clear()
    cache[key] = (total, found)
    return found


def _term_stats(index: LibraryIndex, terms: list[str]) -> tuple[int, Any, dict[str, int]]:
    """Passages in all, average field lengths, and each query word's document frequency."""
    from chord_core.library.ranking import tokens

    total, avg = index.totals()
    return total, avg, {t: doc_freq(index, t, total, WORD_COLUMNS) for t in
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
    window: list[Any] = []
    matched, seen = "all", 0
    for op in ("AND", "OR") if len(terms) > 1 else ("AND",):
        words, check = split_common(ordered, stats[2], stats[0], lambda: filter_share(
            index, filters, stats[0])) if op == "AND" else (ordered, ())
        window, seen = _window(index, f"{WORD_COLUMNS} : ({_match(words, op)})" +
                               (f" AND {narrow}" if narrow else ""), check)
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
