"""Review items: what the watched footage raised, for a person to look at and mark reviewed.

Every alert of a standing check (``library_alerts``, alerts.py: a moment of a watched clip
whose P(entailment) reached the folder's threshold) is a **review item** — severity
``alert`` — and every grounding hit of a watched folder whose task is ``ground`` (a segment
of its target found, from the library's ``target`` passages of the watch's jobs) is one of
severity ``detection``. An item has its source (the clip's folder), clip, time span, the
statement or target, the score (the alert's best P(entailment); a detection has none), the
moment to show (``thumbnail_s``), when it happened as near as the store knows (``at``: the
clip file's modification time plus the moment's start; the alert's time when the file is
gone) and whether, when and by whom it was reviewed. The alert and watch tables stay as
they are (the watch code writes them); the review state is a table of its own (made, as
every library table, by schema.py), keyed by the item's id:

    library_review (item TEXT PRIMARY KEY, reviewed_at REAL NOT NULL, reviewed_by TEXT)
        item ids: ``a<alert id>`` (an alert), ``d<passage id>`` (a detection)

Marking is idempotent (marking a reviewed item again keeps its first time and reviewer);
``mark(..., reviewed=False)`` takes the mark off. ``items`` lists newest first, filtered by
source, severity, reviewed or not, words of the statement and day (UTC).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.errors import InputError

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

REVIEW_SCHEMA = "chord.review-items/v1"
SEVERITIES = ("alert", "detection")
MAX_ITEMS = 1000
MAX_MARK = 1000
MAX_WHO = 80
_ID = re.compile(r"^[ad][0-9]{1,18}$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class ReviewFilters:
    """What narrows the list; every field optional (``reviewed``: None = both)."""

    source: str = ""
    severity: str = ""
    reviewed: bool | None = None
    statement: str = ""
    day: str = ""

    def check(self) -> ReviewFilters:
        if self.severity and self.severity not in SEVERITIES:
            raise InputError(f"unknown severity {self.severity!r}",
                             hint=f"filter by one of: {', '.join(SEVERITIES)}")
        if self.day and not _DAY.match(self.day):
            raise InputError(f"day {self.day!r} is not a date",
                             hint="give the day as YYYY-MM-DD, e.g. 2026-12-03")
        if len(self.source) > 4096 or len(self.statement) > 200:
            raise InputError("a review filter is too long",
                             hint="a folder path, and a few words of the statement")
        return self


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(float(ts), tz=timezone.utc).strftime("%Y-%m-%d")


def _alert_item(row: Any, marks: dict[str, Any]) -> dict[str, Any]:
    import json

    evidence = json.loads(row["evidence_json"] or "[]")
    best = max(evidence, key=lambda e: float(e.get("entailment", 0.0)), default=None)
    item_id = f"a{row['id']}"
    return _with_mark({
        "id": item_id, "severity": "alert", "kind": "standing check",
        "source": str(Path(row["path"]).parent), "clip": Path(row["path"]).name,
        "path": row["path"], "watch": row["watch"], "start_s": float(row["start_s"]),
        "end_s": float(row["end_s"]), "statement": row["statement"],
        "score": round(float(row["probability"]), 4),
        "thumbnail_s": float(best["t_s"]) if best else float(row["start_s"]),
        "evidence": evidence, "job_id": row["job_id"], "created_at": float(row["created_at"]),
        "day": day_of(row["created_at"])}, marks)


def _detection_item(row: Any, marks: dict[str, Any]) -> dict[str, Any]:
    start, end = float(row["t0"]), float(row["t1"])
    return _with_mark({
        "id": f"d{row['id']}", "severity": "detection", "kind": "watched target",
        "source": row["folder"], "clip": row["name"], "path": row["video_path"],
        "watch": row["watch"], "start_s": start, "end_s": end, "statement": row["text"],
        "score": None, "thumbnail_s": round((start + end) / 2, 4), "evidence": [],
        "job_id": row["source"], "created_at": float(row["made_at"]),
        "day": str(row["day"])}, marks)


def _with_mark(item: dict[str, Any], marks: dict[str, Any]) -> dict[str, Any]:
    import os

    try:  # when it happened, as near as the store knows: the clip's file time + the moment
        item["at"] = round(os.stat(item["path"]).st_mtime + item["start_s"], 3)
    except OSError:
        item["at"] = round(item["created_at"], 3)
    mark = marks.get(item["id"])
    item["reviewed"] = mark is not None
    item["reviewed_at"] = float(mark["reviewed_at"]) if mark else None
    item["reviewed_by"] = str(mark["reviewed_by"]) if mark else None
    return item


def _detections(index: LibraryIndex) -> list[Any]:
    """The ``target`` passages (found) of jobs a ground watch ran."""
    return index.read(
        "SELECT p.*, f.watch FROM library_passages p JOIN library_watch_files f "
        "ON f.job_id = p.source JOIN jobs j ON j.job_id = p.source "
        "WHERE p.kind = 'target' AND p.found = 1 AND j.task = 'ground'")


def _matches(item: dict[str, Any], f: ReviewFilters) -> bool:
    if f.source and not (item["source"] == f.source or
                         item["source"].startswith(f.source.rstrip("/") + "/")):
        return False
    if f.severity and item["severity"] != f.severity:
        return False
    if f.reviewed is not None and item["reviewed"] != f.reviewed:
        return False
    if f.day and item["day"] != f.day:
        return False
    words = re.findall(r"\w+", f.statement.lower())
    return all(w in item["statement"].lower() for w in words)


def items(index: LibraryIndex, filters: ReviewFilters | None = None, *,
          limit: int = 200) -> list[dict[str, Any]]:
    """The review items passing ``filters``, newest first (at most ``limit``)."""
    f = (filters or ReviewFilters()).check()
    if not 1 <= limit <= MAX_ITEMS:
        raise InputError(f"limit must be 1–{MAX_ITEMS}, got {limit}", hint="e.g. limit=200")
    marks = {str(r["item"]): r for r in index.read("SELECT * FROM library_review")}
    out: list[dict[str, Any]] = []
    if f.severity in ("", "alert"):
        out += [_alert_item(r, marks) for r in index.read("SELECT * FROM library_alerts")]
    if f.severity in ("", "detection"):
        index.sync()
        out += [_detection_item(r, marks) for r in _detections(index)]
    out = [i for i in out if _matches(i, f)]
    out.sort(key=lambda i: (-i["created_at"], i["path"], -i["start_s"]))
    return out[:limit]


def listing(index: LibraryIndex, filters: ReviewFilters | None = None, *,
            limit: int = 200) -> dict[str, Any]:
    """``chord.review-items/v1``: the items and their counts (all, not reviewed)."""
    found = items(index, filters, limit=limit)
    return {"schema": REVIEW_SCHEMA, "count": len(found),
            "unreviewed": sum(not i["reviewed"] for i in found), "items": found}


def check_ids(ids: Sequence[str]) -> list[str]:
    ids = [str(i).strip() for i in ids]
    if not ids:
        raise InputError("no review items named", hint="give item ids, e.g. a12 (an alert)")
    if len(ids) > MAX_MARK:
        raise InputError(f"{len(ids)} items at once; the most is {MAX_MARK}",
                         hint="mark them in smaller groups, or use 'mark all' with filters")
    bad = [i for i in ids if not _ID.match(i)]
    if bad:
        raise InputError(f"not a review item id: {bad[0][:40]!r}",
                         hint="ids are a<number> (alerts) or d<number> (detections), as "
                              "listed by `python -m chord_core review`")
    return list(dict.fromkeys(ids))


def mark(index: LibraryIndex, ids: Sequence[str], *, reviewed: bool = True, by: str = "") -> int:
    """Mark items reviewed (or not); returns how many changed."""
    ids = check_ids(ids)
    who = (by or "").strip()[:MAX_WHO]
    now = time.time()
    changed = 0
    with index.write() as conn:
        for item in ids:
            if reviewed:
                changed += conn.execute("INSERT OR IGNORE INTO library_review VALUES (?, ?, ?)",
                                        (item, now, who)).rowcount
            else:
                changed += conn.execute("DELETE FROM library_review WHERE item = ?",
                                        (item,)).rowcount
    return changed


def mark_all(index: LibraryIndex, filters: ReviewFilters | None = None, *, by: str = "") -> int:
    """Every unreviewed item passing ``filters`` marked reviewed; how many."""
    f = filters or ReviewFilters()
    todo = [i["id"] for i in items(index, ReviewFilters(f.source, f.severity, False,
                                                        f.statement, f.day), limit=MAX_ITEMS)]
    return mark(index, todo, by=by) if todo else 0


def timeline(found: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Items by day, then by source (the Review page's one timeline per source and day)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for item in found:
        out.setdefault(item["day"], {}).setdefault(item["source"], []).append(item)
    return out


__all__ = ["ReviewFilters", "items", "listing", "mark", "mark_all", "timeline", "REVIEW_SCHEMA"]
