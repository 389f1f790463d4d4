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
from chord_ui.i18n import t
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


def _parent_summary(row: dict[str, Any]) -> str:
    summary = row.get("summary") or {}
    doc = summary.get("document") or {}
    if isinstance(doc, dict) and doc.get("chapters"):
        return t("{n} chapter(s)", n=len(doc["chapters"]))
    p = summary.get("progress") or {}
    if p.get("total"):
        return t("{done} of {total} done", done=int(p.get("done") or 0), total=int(p["total"]))
    return ""


def summary_text(row: dict[str, Any], store: Any) -> str:
    """The row's verdict or summary, one short line ("" when there is none yet)."""
    if row["state"] == "failed":
        return _short((row.get("error") or {}).get("message") or t("failed"))
    if history_parents.is_parent(row):
        return _short(_parent_summary(row))
    if row["state"] not in ("done", "cancelled"):
        return ""
    return _short(_result_summary(store.get_result(row["job_id"])))


def _thumb(row: dict[str, Any], store: Any) -> str | None:
    """The row's clip's thumbnail; a parent with no clip of its own (a batch) shows its first
    clip's."""
    uri = thumbnail_uri(str(row.get("video_path") or ""))
    if uri is None and history_parents.is_parent(row):
        from chord_core.runtime.store_history import first_child_video

        uri = thumbnail_uri(first_child_video(store, row["job_id"]))
    return uri


def table_rows(rows: list[dict[str, Any]], store: Any) -> list[dict[str, Any]]:
    """The table's rows, in the page's order."""
    out = []
    for r in rows:
        dur = duration_s(r)
        out.append({
            "thumb": _thumb(r, store),
            "time": datetime.fromtimestamp(r["submitted_at"]).strftime("%Y-%m-%d %H:%M:%S"),
            "clip": display_name(r), "task": history_parents.task_label(r),
            "summary": summary_text(r, store) or "—",
            "query": r["query"] or "—",
            "model": r["model"] or "—",
            "state": t(r["state"]),
            "duration": human_duration(dur) if dur is not None else "—"})
    return out
