"""Searching the library: words in, ranked hits out (``chord.library-search/v1``).

A query is words, not FTS5 syntax: each word is quoted (so ``-``, ``"``, ``NEAR`` or ``*``
typed by a user can never be a syntax error or an operator), all words must match; when no
passage has all of them, passages with any of them are ranked instead (the answer says
``matched: "any"``). Ranked by bm25 (text weighted over the file name and folder). Filters:
folder (the folder or below it), date (the day the result was made, UTC), task.

A hit: the clip (path, name, folder), the time range, the passage's kind and text with the
matched words marked (``snippet``, ``[`` ``]`` around each; ``parts``, the same as
``[[text, matched], …]`` for clients that render it), the job or run that made it, a
``thumbnail_s`` (the moment to show: the range's middle) and the score (lower is better, as
bm25 reports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from chord_core.errors import InputError
from chord_core.library.index import LibraryIndex

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

    def sql(self) -> tuple[str, list[Any]]:
        clauses, params = [], []
        if self.folder:
            folder = self.folder.rstrip("/") or "/"
            clauses.append("(p.folder = ? OR p.folder LIKE ? ESCAPE '\\')")
            like = folder.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            params += [folder, like.rstrip("/") + "/%"]
        if self.date_from:
            clauses.append("p.day >= ?")
            params.append(self.date_from)
        if self.date_to:
            clauses.append("p.day <= ?")
            params.append(self.date_to)
        if self.task:
            clauses.append("p.task = ?")
            params.append(self.task)
        return "".join(f" AND {c}" for c in clauses), params


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


_SELECT = ("SELECT p.id, p.source, p.kind, p.task, p.video_path, p.folder, p.name, p.t0, "
           "p.t1, p.made_at, p.day, p.model, p.verdict, p.found, f.rank AS score, "
           "snippet(library_fts, 0, char(2), char(3), '…', 24) AS snippet "
           "FROM library_fts f JOIN library_passages p ON p.id = f.rowid "
           "WHERE library_fts MATCH ?{where} ORDER BY f.rank LIMIT ?")


def search(index: LibraryIndex, q: str, *, filters: Filters | None = None, limit: int = 20,
           sync: bool = True) -> dict[str, Any]:
    """Ranked hits for ``q`` (see the module docstring). ``sync`` first indexes what the
    store saved since the last search."""
    terms, limit = query_terms(q), check_limit(limit)
    filters = (filters or Filters()).check()
    if sync:
        index.sync()
    where, params = filters.sql()
    sql = _SELECT.format(where=where)
    matched, rows = "all", index.read(sql, [_match(terms, "AND"), *params, limit])
    if not rows and len(terms) > 1:
        matched, rows = "any", index.read(sql, [_match(terms, "OR"), *params, limit])
    gone = set(index.forget_missing([r["source"] for r in rows]))
    hits = [_hit(r) for r in rows if r["source"] not in gone]
    return {"schema": SEARCH_SCHEMA, "query": q, "terms": terms, "matched": matched,
            "filters": {k: v for k, v in vars(filters).items() if v}, "hits": hits}


def snippet_parts(marked: str) -> list[list[Any]]:
    """The snippet as ``[[text, matched], …]``: a client renders the matched words however
    it likes (bold, highlighted) without parsing markup out of user or model text."""
    parts: list[list[Any]] = []
    for i, piece in enumerate(re.split("[\x02\x03]", marked or "")):
        if piece:
            parts.append([piece, i % 2 == 1])
    return parts


def _hit(row: Any) -> dict[str, Any]:
    t0, t1 = float(row["t0"]), float(row["t1"])
    parts = snippet_parts(row["snippet"])
    return {"source": row["source"], "kind": row["kind"], "task": row["task"],
            "video_path": row["video_path"], "name": row["name"], "folder": row["folder"],
            "start_s": round(t0, 3), "end_s": round(t1, 3),
            "thumbnail_s": round((t0 + t1) / 2, 3),
            "snippet": "".join(f"[{p}]" if hit else p for p, hit in parts), "parts": parts,
            "day": row["day"], "made_at": row["made_at"], "model": row["model"],
            "verdict": row["verdict"] or None, "found": bool(row["found"]),
            "score": round(float(row["score"]), 4), "checked": None}
