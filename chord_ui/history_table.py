"""The History table's rows: one per job or run, with a thumbnail, the file name, the task,
the verdict or summary, the job's own run time.

The file name is the clip's, never the service's label ("api chat", "api ground"): a label
the service made up is passed over for the stored file name. A row's time is its own — a
parent's (a long run, a batch) is the run's wall time; its children, listed inside it, show
theirs (``history_parents``). The summary comes from the stored result (a grounding
outcome, a statement's verdict, the start of a description), a run's document (its chapters),
or a failure's message.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from chord_core.types import Result
from chord_ui import history_parents
from chord_ui.formatting import human_duration, summary_line
from chord_ui.i18n import lang, t
from chord_ui.thumbnails import thumbnail_uri

log = logging.getLogger(__name__)

SUMMARY_CHARS = 90
SERVICE_LABELS = ("api ",)  # labels the service gives jobs that came with no name


def display_name(row: dict[str, Any]) -> str:
    """The clip's name: the job's label unless the service made it up, else the file's."""
    label = str((row.get("spec") or {}).get("label") or "")
    if label and not label.startswith(SERVICE_LABELS):
        return label
    return str(row.get("video_name") or Path(str(row.get("video_path") or "")).name or "?")


def duration_s(row: dict[str, Any], now: float | None = None) -> float | None:
    """The job's own run time (None while queued)."""
    start = row.get("started_at") or row.get("submitted_at")
    if start is None or row["state"] == "queued":
        return None
    end = row.get("finished_at") or (time.time() if now is None else now)
    return max(0.0, end - start)


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS - 1] + "…"


def _result_summary(doc: dict[str, Any] | None) -> str:
    if doc is None:
        return ""
    try:
        result = Result.from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:
        log.info("stored result unreadable for the summary: %s", exc)
        return ""
    if result.task in ("ground", "entail"):
        return summary_line(result)
    return result.text or t("(the model returned no text)")


def counts_summary(summary: dict[str, Any]) -> str:
    """What a finished batch did, from its summary's counts: "10 clips described, 0 failed"
    (issue 39: "10 of 10 done" said nothing of the task or of failures). "" without counts."""
    counts = summary.get("counts")
    if not isinstance(counts, dict) or not counts:
        return ""
    c = {k: int(v or 0) for k, v in counts.items()}
    n = c.get("done", 0) + c.get("skipped", 0)
    task = summary.get("task")
    if task == "describe":
        parts = [t("{n} clip(s) described", n=n)]
    elif task == "ground":
        parts = [t("{n} clip(s) searched for “{query}”", n=n, query=summary.get("query") or "")]
    else:
        parts = [t("{n} analysed", n=n)]
    parts.append(t("{n} failed", n=c.get("failed", 0)))
    if c.get("cancelled"):
        parts.append(t("{n} cancelled", n=c["cancelled"]))
    if c.get("skipped"):
        parts.append(t("{n} reused from earlier runs", n=c["skipped"]))
    return ("，" if lang() == "zh" else ", ").join(parts)


def _parent_summary(row: dict[str, Any]) -> str:
    summary = row.get("summary") or {}
    doc = summary.get("document") or {}
    if isinstance(doc, dict) and doc.get("chapters"):
        return t("{n} chapter(s)", n=len(doc["chapters"]))
    p = summary.get("progress") or {}
    if row["state"] in ("queued", "running") and p.get("total"):
        return t("running: {done} of {total} finished", done=int(p.get("done") or 0),
                 total=int(p["total"]))
    return counts_summary(summary)


# what the summary column says of a row with no summary of its own (never a bare "—")
NO_SUMMARY = {"queued": "waiting in the queue", "running": "still running",
              "cancelled": "cancelled before a result", "done": "no result stored"}


def summary_text(row: dict[str, Any], store: Any) -> str:
    """The row's verdict or summary, one short line; a row without one says why."""
    if history_parents.is_parent(row):
        text = _parent_summary(row)
        if text:
            return _short(text)
    if row["state"] == "failed":
        return _short((row.get("error") or {}).get("message") or t("failed"))
    if row["state"] in ("done", "cancelled") and not history_parents.is_parent(row):
        text = _result_summary(store.get_result(row["job_id"]))
        if text:
            return _short(text)
    return t(NO_SUMMARY.get(row["state"], row["state"]))


# a clip that is gone (or never had a frame to show): a blank grey tile, where the table
# would otherwise print "None" in the image column
NO_THUMB = ("data:image/svg+xml;utf8,<svg xmlns='http://www.w3.org/2000/svg' width='64' "
            "height='36'><rect width='64' height='36' rx='3' fill='%23d9dce1'/></svg>")


def _thumb(row: dict[str, Any], store: Any) -> str:
    """The row's clip's thumbnail; a parent with no clip of its own (a batch) shows its first
    clip's; ``NO_THUMB`` when there is none to show."""
    uri = thumbnail_uri(str(row.get("video_path") or ""))
    if uri is None and history_parents.is_parent(row):
        from chord_core.runtime.store_history import first_child_video

        uri = thumbnail_uri(first_child_video(store, row["job_id"]))
    return uri or NO_THUMB


def table_rows(rows: list[dict[str, Any]], store: Any) -> list[dict[str, Any]]:
    """The table's rows, in the page's order."""
    out = []
    for r in rows:
        dur = duration_s(r)
        # what a reviewer scans first comes first, the long summary (which quotes the
        # target or statement: no query column of its own) last, filling what is left; the
        # model is in the selected row's details: at 1280 px nothing needs sideways scrolling
        out.append({
            "thumb": _thumb(r, store),
            "time": datetime.fromtimestamp(r["submitted_at"]).strftime("%m-%d %H:%M"),
            "clip": display_name(r), "task": history_parents.task_label(r),
            "state": t(r["state"]),
            "duration": human_duration(dur) if dur is not None else "—",
            "summary": summary_text(r, store)})
    return out
