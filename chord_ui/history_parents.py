"""History of a parent job: one row for the run, its children inside.

A chapters run, a long grounding or a search is one parent job in the store
(``chord_core.runtime.parents``); its chunk jobs carry ``parent`` and are not rows of the
History table of their own. Selected, the run shows how far it got (its summary's progress),
its chunks (and the searches made in it) as a small table, and opens in Analyze through
``?job=`` — the same link a reload or a second tab uses — where its chapters, progress and
last search come back. Any other parent (a batch, a ``/batch_predict`` request, whoever made
it) lists its clips, each with its own run time (not the batch's wall time), and a selected
clip opens in Analyze by its own ``?job=``.
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_core.runtime.store_parents import children, is_parent
from chord_ui import resources
from chord_ui.formatting import human_duration, md_escape
from chord_ui.i18n import link_params, t
from chord_ui.inputs import show_error

log = logging.getLogger(__name__)

ANALYZE_PAGE = "views/analyze.py"
KINDS = {"chapters": "chapters (long video)", "ground": "ground (long video)",
         "search": "search (long video)"}
MAX_CHILD_ROWS = 500  # a three-hour clip has a few hundred chunks at most

__all__ = ["is_parent", "is_long_video", "task_label", "show", "cancel", "delete"]


BATCH_KINDS = {"batch": "Batch", "batch_predict": "Batch (API)"}  # parents of many clips


def task_label(row: dict[str, Any]) -> str:
    """The History table's task of a row, in words a user reads: a long run says so, a
    batch (the Batch page's, ``chord batch``'s, a ``/batch_predict`` request) is "Batch"."""
    if not is_parent(row):
        return row["task"]
    kind = str((row.get("spec") or {}).get("long_run") or "")
    if kind in BATCH_KINDS:
        return t(BATCH_KINDS[kind])
    return t(KINDS[row["task"]]) if row["task"] in KINDS else row["task"]


def _child_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows[:MAX_CHILD_ROWS]:
        end, start = r.get("finished_at"), r.get("started_at")
        out.append({"job": str((r.get("spec") or {}).get("label") or r["job_id"]),
                    "task": task_label(r), "state": t(r["state"]),
                    "duration": human_duration(end - start) if end and start else "—"})
    return out


def show(row: dict[str, Any]) -> None:
    """How far the run got, its chunks, and Open in Analyze (``?job=``)."""
    summary = row.get("summary") or {}
    p = summary.get("progress") or {}
    if p.get("total"):
        st.progress(min(1.0, int(p.get("done") or 0) / int(p["total"])),
                    text=t("{stage}: {done} of {total} done", stage=md_escape(str(p["stage"])),
                           done=int(p.get("done") or 0), total=int(p["total"])))
    if row["state"] == "failed":
        show_error(row.get("error") or {"message": "the long-video run failed"})
    elif row["state"] in ("queued", "cancelled") and is_long_video(row):
        st.info(t("Stopped part-way. Open it in Analyze and press **Run** to go on: "
                  "finished chunks are kept."), icon=":material/pause_circle:")
    try:
        kids = children(resources.store(), row["job_id"])
    except ChordError as exc:
        log.info("children of %s unreadable: %s", row["job_id"], exc)
        kids = []
    st.caption(t("{n} job(s) in this run", n=len(kids)))
    if not is_long_video(row):
        _batch_children(row, kids)
        return
    if kids:
        st.dataframe(_child_rows(kids), hide_index=True, key=f"children-{row['job_id']}",
                     height=min(400, 38 + 35 * len(kids)))
    target = row.get("parent") or row["job_id"]  # a search opens in its chapters run
    if st.button(t("Open in Analyze"), key=f"open-{row['job_id']}", type="primary",
                 icon=":material/open_in_new:"):
        st.switch_page(ANALYZE_PAGE, query_params=link_params(job=target))


def is_long_video(row: dict[str, Any]) -> bool:
    """A long-video run (opens in Analyze as one run), not a batch of clips."""
    return str((row.get("spec") or {}).get("long_run") or "") in KINDS


def _batch_children(row: dict[str, Any], kids: list[dict[str, Any]]) -> None:
    """A batch's clips, each with its own run time; a selected finished one opens in
    Analyze by its own ``?job=``."""
    if not kids:
        return
    event = st.dataframe(_child_rows(kids), hide_index=True, key=f"children-{row['job_id']}",
                         on_select="rerun", selection_mode="single-row",
                         height=min(400, 38 + 35 * len(kids)))
    picked = [i for i in event.selection.rows if 0 <= i < len(kids)]
    if not picked:
        st.caption(":material/touch_app: " + t("Select a clip to open its result in Analyze."))
        return
    kid = kids[picked[0]]
    if kid["state"] not in ("done", "cancelled"):
        st.caption(t("This clip has no result yet ({state}).", state=t(kid["state"])))
        return
    if st.button(t("Open in Analyze"), key=f"open-{kid['job_id']}", type="primary",
                 icon=":material/open_in_new:"):
        st.switch_page(ANALYZE_PAGE, query_params=link_params(job=kid["job_id"]))


def cancel(job_id: str) -> None:
    """Cancel the run this server drives (its chunks in flight are cancelled with it), or a
    batch's unfinished clips."""
    runs = resources.long_runs()
    snap = runs.by_run(job_id)
    if snap is not None:
        runs.cancel(snap["key"])
        return
    manager = resources.job_manager()  # a batch: its clips not finished yet
    for kid in children(resources.store(), job_id):
        if kid["state"] in ("queued", "running"):
            manager.cancel(kid["job_id"])


def delete(manager: Any, job_id: str) -> bool:
    """Delete a run with its children (a chapters run: its searches too): the job manager
    does it (``manager.parents.delete``, the store's one writer); a row still running under
    a live lease is refused (``errors.AlreadyRunning``: cancel it first)."""
    return bool(manager.parents.delete(job_id))
