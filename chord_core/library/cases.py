"""Cases: moments gathered under a name, to hand over as one folder or ZIP (case_export.py).

A moment comes from a review item, a search hit or a result: the clip, the time span, a
label (the statement, target or passage), where it came from (``origin``: review, search,
result, ask) and the job whose result it belongs to (its stored result goes into the case's
JSON). Tables, in the job store's file beside the library's (made by schema.py):

    library_cases        (id, name UNIQUE, created_at)
    library_case_moments (id, case_id, path, start_s, end_s, label, origin, ref, job_id,
                          score, added_at)  UNIQUE (case_id, path, start_s, end_s, label):
                          the same moment added twice is kept once

Paths come from the store (a review item's or a hit's clip), never from a request; the
export opens each under the media roots again (``check_regular_video``).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from chord_core.errors import InputError

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

MAX_NAME = 80
MAX_LABEL = 500
MAX_MOMENTS = 500
ORIGINS = ("review", "search", "result", "ask")
_NAME = re.compile(r"^[\w][\w .,()\-]*$", re.UNICODE)
def check_name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME or not _NAME.match(name):
        raise InputError(f"{name[:40]!r} is not a case name",
                         hint=f"1–{MAX_NAME} letters, digits, spaces and . , ( ) - _, "
                              "e.g. 'yard 2026-12-03'")
    return name


def open_case(index: LibraryIndex, name: str) -> int:
    """The case's id, made when it does not exist."""
    name = check_name(name)
    with index.write() as conn:
        conn.execute("INSERT OR IGNORE INTO library_cases (name, created_at) VALUES (?, ?)",
                     (name, time.time()))
        return int(conn.execute("SELECT id FROM library_cases WHERE name = ?",
                                (name,)).fetchone()[0])


def add_moment(index: LibraryIndex, case: str, *, path: str, start_s: float, end_s: float,
               label: str, origin: str, ref: str = "", job_id: str = "",
               score: float | None = None) -> bool:
    """Add one moment to ``case`` (made if new); False when it was there already."""
    if origin not in ORIGINS:
        raise InputError(f"unknown origin {origin!r}", hint=f"one of {', '.join(ORIGINS)}")
    start, end = float(start_s), float(end_s)
    if not (0.0 <= start <= end <= 7 * 86400.0):
        raise InputError(f"the moment {start}–{end} s is not a time span",
                         hint="start and end in seconds, start ≤ end")
    case_id = open_case(index, case)
    if len(moments(index, case)) >= MAX_MOMENTS:
        raise InputError(f"case {case!r} holds {MAX_MOMENTS} moments, the most",
                         hint="start a second case for the rest")
    with index.write() as conn:
        return conn.execute(
            "INSERT OR IGNORE INTO library_case_moments (case_id, path, start_s, end_s, label, "
            "origin, ref, job_id, score, added_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (case_id, str(path), round(start, 4), round(end, 4), str(label)[:MAX_LABEL],
             origin, str(ref)[:64], str(job_id)[:64], score, time.time())).rowcount == 1


def add_review_item(index: LibraryIndex, case: str, item: dict[str, Any]) -> bool:
    """A review item (review.py) as a moment of ``case``."""
    return add_moment(index, case, path=item["path"], start_s=item["start_s"],
                      end_s=item["end_s"], label=item["statement"], origin="review",
                      ref=item["id"], job_id=item.get("job_id") or "", score=item.get("score"))


def add_hit(index: LibraryIndex, case: str, hit: dict[str, Any]) -> bool:
    """A search hit (search.py) as a moment of ``case``."""
    label = "".join(part for part, _ in hit.get("parts", [])) or hit.get("snippet", "")
    checked = hit.get("checked") or {}
    return add_moment(index, case, path=hit["video_path"], start_s=hit["start_s"],
                      end_s=hit["end_s"], label=label, origin="search", ref=hit["source"],
                      job_id=hit["source"], score=checked.get("p_entailment"))


def add_passage(index: LibraryIndex, case: str, source: str, start_s: float, end_s: float) -> bool:
    """A search hit named as a client sends it back (its ``source`` and span) as a moment:
    the passage must be in the index, and its clip and words come from there, never from
    the request. InputError when no passage of ``source`` has that span."""
    rows = index.read(
        "SELECT p.source, p.video_path, p.t0, p.t1, f.text FROM library_passages p "
        "JOIN library_fts f ON f.rowid = p.id WHERE p.source = ? AND abs(p.t0 - ?) < 0.01 "
        "AND abs(p.t1 - ?) < 0.01 LIMIT 1", (str(source)[:64], float(start_s), float(end_s)))
    if not rows:
        raise InputError(f"no search hit of {str(source)[:64]!r} at {start_s}–{end_s} s",
                         hint="give a hit's source, start_s and end_s as GET /v1/search "
                              "returned them")
    row = rows[0]
    return add_hit(index, case, {"video_path": row["video_path"], "start_s": row["t0"],
                                 "end_s": row["t1"], "snippet": row["text"],
                                 "source": row["source"]})


def stored_result(index: LibraryIndex, job_id: str) -> dict[str, Any] | None:
    """The job's stored ``chord.result/v1`` (the store's ``results`` row), or None."""
    import json

    rows = index.read("SELECT result_json FROM results WHERE job_id = ?", (str(job_id)[:64],))
    return json.loads(rows[0]["result_json"]) if rows else None


def span_label(result: dict[str, Any], start_s: float, end_s: float) -> str:
    """Words for a moment of a result: the segment's label it overlaps, else the query."""
    for seg in result.get("segments") or []:
        if seg.get("start_s", 0.0) <= end_s and seg.get("end_s", 0.0) >= start_s \
                and seg.get("label"):
            return str(seg["label"])
    return str(result.get("query") or result.get("text") or result.get("task") or "moment")


def add_job_span(index: LibraryIndex, case: str, job_id: str, start_s: float, end_s: float,
                 label: str = "") -> bool:
    """A moment of a finished job's result: the clip is the result's own, and the span must
    lie within it (``video.duration_s``). InputError for a job without a stored result."""
    result = stored_result(index, job_id)
    if result is None:
        raise InputError(f"no finished job {str(job_id)[:64]!r} with a stored result",
                         hint="use the id of a done job (History, or GET /v1/jobs)")
    start, end = float(start_s), float(end_s)
    duration = float((result.get("video") or {}).get("duration_s") or 0.0)
    if not (0.0 <= start <= end <= duration + 0.05):
        raise InputError(f"{start:g}–{end:g} s is not within the clip (0–{duration:.2f} s)",
                         hint="give start and end in seconds inside the clip, start ≤ end")
    return add_moment(index, case, path=result["video"]["path"], start_s=start,
                      end_s=min(end, duration), label=label.strip() or
                      span_label(result, start, end), origin="result", ref=str(job_id),
                      job_id=str(job_id))


def cases(index: LibraryIndex) -> list[dict[str, Any]]:
    """Every case with its moment count, newest first."""
    return [dict(r) for r in index.read(
        "SELECT c.id, c.name, c.created_at, COUNT(m.id) AS moments FROM library_cases c "
        "LEFT JOIN library_case_moments m ON m.case_id = c.id GROUP BY c.id "
        "ORDER BY c.created_at DESC")]


def moments(index: LibraryIndex, case: str) -> list[dict[str, Any]]:
    """The case's moments in the order they were added (empty for an unknown case)."""
    return [dict(r) for r in index.read(
        "SELECT m.* FROM library_case_moments m JOIN library_cases c ON c.id = m.case_id "
        "WHERE c.name = ? ORDER BY m.id", (check_name(case),))]


def remove_moment(index: LibraryIndex, case: str, moment_id: int) -> bool:
    with index.write() as conn:
        return conn.execute(
            "DELETE FROM library_case_moments WHERE id = ? AND case_id = (SELECT id FROM "
            "library_cases WHERE name = ?)", (int(moment_id), check_name(case))).rowcount == 1


__all__ = ["open_case", "add_moment", "add_review_item", "add_hit", "add_passage",
           "add_job_span", "stored_result", "cases", "moments", "remove_moment", "check_name"]
