"""History page body: past analyses from the store, paged, newest first; open one in the
Analyze views, read a failure's message, or delete it. The filters, sort and page are kept
in the URL (``?show=&task=&name=&sort=&page=``), so a reload or a shared link shows the same.

Rows come from the SQLite store (``resources.store``) — they survive restarts. Jobs the
shared manager is still working on show their live state: while the page shows one, the
table and the selected job refresh on their own every REFRESH_S seconds (a fragment; the
rest of the page is not rerun). A cancelled grounding job keeps the frames it finished (a
partial result), which opens in Analyze like a finished one. "Open in Analyze" files the stored
result in the Analyze page's session state (``session.show_stored``) under the clip and task,
then switches page: the Analyze views render it like a fresh result (frames only while the
clip file is still there).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_core.runtime.store_history import (
    MAX_NAME_CHARS, ORDERS, HistoryQuery, history_count, history_rows, history_tasks)
from chord_core.types import Result
from chord_ui import history_parents, resources, session
from chord_ui.formatting import human_duration, md_escape, summary_line
from chord_ui.history_table import display_name, duration_s, table_rows
from chord_ui.i18n import choice_key, link_params, t
from chord_ui.inputs import K_CLIP, K_CLIP_ERROR, K_PROMPT, K_TARGET, K_TASK, show_error
from chord_ui.uploads import ClipSource, local_source, servable, uploads_dir

log = logging.getLogger(__name__)

PAGE_SIZE = 20
REFRESH_S = 2.0  # while a job on the page is queued or running
PREVIEW_CHARS = 280
K_TABLE, K_PAGE, K_FILTER = "history_table", "history_page", "history_filter"
K_TASK_FILTER, K_NAME_FILTER, K_SORT = "history_task", "history_name", "history_sort"
K_QUERY = "history_query"  # the filters the page was last shown with (a change: page 1)
SORTS = {"newest": "Newest first", "oldest": "Oldest first", "longest": "Longest first"}
K_CONFIRM, K_NOTICE = "history_confirm_delete", "history_notice"
FILTERS = {"all": "All", "done": "Done", "failed": "Failed", "cancelled": "Cancelled"}
ANALYZE_PAGE = "views/analyze.py"
# the filters kept in the URL: session key → (query parameter, default)
URL_PARAMS = {K_FILTER: ("show", "all"), K_TASK_FILTER: ("task", "all"),
              K_NAME_FILTER: ("name", ""), K_SORT: ("sort", "newest")}


def live_row(row: dict[str, Any], manager: Any) -> dict[str, Any]:
    """The stored row, completed from the manager for jobs this server ran: live state of
    jobs still running, the worker and start time (the store learns mainly how jobs end)."""
    try:
        status = manager.status(row["job_id"])
    except KeyError:
        return row
    out = {**row, "worker": row.get("worker") or status.worker,
           "started_at": row.get("started_at") or status.started_at}
    if row["state"] in ("queued", "running"):
        out.update(state=status.state.value, finished_at=status.finished_at,
                   error=status.error or row.get("error"))
    return out


def history() -> None:
    """Filters and sort, paging, the table with row selection, then the selected job."""
    store = resources.store()
    query = _controls(store)
    total = history_count(store, query)
    if total == 0:
        _to_url(query, 1)
        _notice()
        if store.count_jobs(top_level=True):
            st.info(t("No analysis matches these filters."), icon=":material/filter_alt_off:")
        else:
            st.info(t("Nothing here yet. Analyses you run on the Analyze or Batch page appear "
                      "here, newest first."), icon=":material/history:")
        return
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = _pager(query, pages)
    query = replace(query, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    live = any(r["state"] in ("queued", "running") for r in _page_rows(query))
    st.fragment(_table, run_every=REFRESH_S if live else None)(query, page, pages, live)


def _from_url() -> None:
    """A reload or a shared link (``?show=failed&task=ground&name=…&sort=oldest&page=2``)
    seeds the filters that this session has not set yet; a bad value is left out."""
    allowed: dict[str, Any] = {K_FILTER: FILTERS, K_SORT: ORDERS}
    for key, (param, _) in URL_PARAMS.items():
        value = str(st.query_params.get(param) or "")[:MAX_NAME_CHARS]
        if key not in st.session_state and value and value in allowed.get(key, (value,)):
            st.session_state[key] = value


def _to_url(query: HistoryQuery, page: int) -> None:
    """The filters and page into the URL (defaults left out; other parameters kept)."""
    values = {"show": query.state or "all", "task": query.task or "all", "name": query.name,
              "sort": query.order, "page": str(page)}
    defaults = {param: default for param, default in URL_PARAMS.values()} | {"page": "1"}
    for param, value in values.items():
        if value and value != defaults[param]:
            if st.query_params.get(param) != value:
                st.query_params[param] = value
        elif param in st.query_params:
            del st.query_params[param]


def _url_page() -> int:
    raw = str(st.query_params.get("page") or "1")
    return int(raw) if raw.isdigit() and 0 < len(raw) < 6 else 1


def _controls(store: Any) -> HistoryQuery:
    """State, task, text in the file name, sort: the page's query (page 1 of it)."""
    _from_url()
    default = None if K_FILTER in st.session_state else "all"  # seeded: no second default
    choice = st.segmented_control(t("Show"), list(FILTERS), format_func=lambda k: t(FILTERS[k]),
                                  key=choice_key(K_FILTER), default=default,
                                  required=True) or "all"
    tasks = ["all", *history_tasks(store)]
    if st.session_state.get(K_TASK_FILTER) not in tasks:
        st.session_state[K_TASK_FILTER] = "all"
    task_col, name_col, sort_col = st.columns([1, 2, 1])
    task = task_col.selectbox(t("Task"), tasks, key=choice_key(K_TASK_FILTER),
                              format_func=lambda k: t("All tasks") if k == "all" else t(k))
    name = name_col.text_input(t("File name contains"), key=K_NAME_FILTER,
                               max_chars=MAX_NAME_CHARS, placeholder="street.mp4")
    order = sort_col.selectbox(t("Sort"), list(ORDERS), key=choice_key(K_SORT),
                               format_func=lambda k: t(SORTS[k]))
    return HistoryQuery(task=None if task == "all" else task,
                        state=None if choice == "all" else choice, name=name or "",
                        order=order or "newest")


def _pager(query: HistoryQuery, pages: int) -> int:
    """The page shown (1-based): back to 1 when the filters change; Previous/Next move it;
    the URL's page on the first showing."""
    if K_QUERY not in st.session_state:
        st.session_state[K_QUERY], st.session_state[K_PAGE] = query, _url_page()
    elif st.session_state.get(K_QUERY) != query:
        st.session_state[K_QUERY], st.session_state[K_PAGE] = query, 1
    page = min(max(1, int(st.session_state.get(K_PAGE) or 1)), pages)
    st.session_state[K_PAGE] = page
    _to_url(query, page)
    if pages > 1:
        prev, where, nxt = st.columns([1, 2, 1], vertical_alignment="center")
        prev.button(t("Previous"), key="history_prev", icon=":material/chevron_left:",
                    disabled=page <= 1, on_click=_turn, args=(page - 1,), width="stretch")
        where.caption(t("page {page} of {pages}", page=page, pages=pages))
        nxt.button(t("Next"), key="history_next", icon=":material/chevron_right:",
                   disabled=page >= pages, on_click=_turn, args=(page + 1,), width="stretch")
    return page


def _turn(page: int) -> None:
    st.session_state[K_PAGE] = page
    st.session_state[K_TABLE] = {"selection": {"rows": [], "columns": [], "cells": []}}


def _page_rows(query: HistoryQuery) -> list[dict[str, Any]]:
    manager = resources.job_manager()
    return [live_row(r, manager) for r in history_rows(resources.store(), query)]


def _table(query: HistoryQuery, page: int, pages: int, live: bool) -> None:
    """The page's rows and the selected job. Refreshed every REFRESH_S seconds while a job
    on the page is unfinished; once none is, one full rerun stops the refreshing."""
    store = resources.store()
    _notice()  # a delete (a button in here) reruns only this fragment
    rows = _page_rows(query)
    if live and not any(r["state"] in ("queued", "running") for r in rows):
        st.rerun(scope="app")
    total = history_count(store, query)
    unfinished = sum(r["state"] in ("queued", "running") for r in rows)
    st.caption(t("1 analysis · page {page} of {pages} · {order} · stored in `{path}`"
                 if total == 1 else "{total} analyses · page {page} of {pages} · {order} · "
                 "stored in `{path}`", total=total, page=page, pages=pages,
                 order=t(SORTS[query.order]).lower(), path=store.path)
               + (t(" · {n} unfinished: refreshed every {s} s", n=unfinished,
                    s=f"{REFRESH_S:g}") if unfinished else ""))
    labels = {k: t(k) for k in ("time", "task", "state", "duration")}
    event = st.dataframe(table_rows(rows, store), hide_index=True, key=K_TABLE,
                         on_select="rerun", selection_mode="single-row", row_height=56,
                         column_config={
                             **labels,
                             "thumb": st.column_config.ImageColumn("", width="small"),
                             "clip": st.column_config.TextColumn(t("clip"), width="medium"),
                             "summary": st.column_config.TextColumn(t("summary"))})
    picked = [i for i in event.selection.rows if 0 <= i < len(rows)]
    if not picked:
        st.caption(":material/touch_app: " + t("Select a row to open it in Analyze, read its "
                                                "error, or delete it."))
        return
    _details(rows[picked[0]])


def _notice() -> None:
    text = st.session_state.pop(K_NOTICE, None)
    if text:
        st.success(md_escape(text), icon=":material/delete:")


def _details(row: dict[str, Any]) -> None:
    job_id, state = row["job_id"], row["state"]
    with st.container(border=True):
        st.subheader(f"{md_escape(display_name(row))} · {row['task']}")
        st.caption(" · ".join(_facts(row)))
        if row["query"]:
            what = t("Target") if row["task"] == "ground" else t("Prompt")
            st.markdown(f"**{what}:** {md_escape(row['query'])}")
        # a batch row names no file of its own (its clips are its children's rows)
        if row["video_path"] and not history_parents.is_parent(row) and \
                not servable(row["video_path"]):
            st.caption(":material/warning: " + t(
                "The video file at {path} is gone or outside the media roots; the stored "
                "result can still be opened (without frames).", path=md_escape(row["video_path"])))
        if history_parents.is_parent(row):
            history_parents.show(row)
            _actions(row, state)
            return
        result = _stored_result(job_id) if state in ("done", "cancelled") else None
        _state_message(row, partial=result is not None and result.partial)
        if result is not None:
            _preview(result)
        _actions(row, state, has_result=result is not None)


def _facts(row: dict[str, Any]) -> list[str]:
    when = datetime.fromtimestamp(row["submitted_at"]).strftime("%Y-%m-%d %H:%M:%S")
    facts = [f"`{row['job_id']}`", when,
             t("model {name}", name=md_escape(row["model"] or "—"))]
    dur = duration_s(row)
    if dur is not None:
        facts.append(human_duration(dur))
    if row.get("worker"):
        facts.append(t("worker {name}", name=md_escape(row["worker"])))
    if row.get("batch_id"):
        facts.append(t("batch {id}", id=f"`{row['batch_id']}`"))
    return facts


def _preview(result: Result) -> None:
    """One line of the stored result: the grounding outcome or the description's start."""
    if result.task in ("ground", "entail"):
        st.markdown(md_escape(summary_line(result)))
        return
    text = " ".join(result.text.split())
    more = "…" if len(text) > PREVIEW_CHARS else ""
    st.markdown(f"> {md_escape(text[:PREVIEW_CHARS])}{more}" if text
                else "_" + t("(the model returned no text)") + "_")


def _state_message(row: dict[str, Any], *, partial: bool = False) -> None:
    state = row["state"]
    if state == "failed":
        show_error(row.get("error") or {"message": "the analysis failed (no message kept)"})
    elif state == "cancelled" and partial:
        st.warning(t("Cancelled. **Partial result**: the frames finished before Cancel are "
                     "kept."), icon=":material/incomplete_circle:")
    elif state == "cancelled":
        st.info(t("This analysis was cancelled."), icon=":material/stop_circle:")
    elif state in ("queued", "running"):
        st.info(t("Still in progress; its result will be kept here when it finishes."),
                icon=":material/hourglass_top:")


def _actions(row: dict[str, Any], state: str, *, has_result: bool = False) -> None:
    job_id = row["job_id"]
    cols = st.columns([1, 1, 2])
    if has_result and cols[0].button(t("Open in Analyze"), key=f"open-{job_id}",
                                     type="primary", icon=":material/open_in_new:",
                                     width="stretch"):
        if open_in_analyze(row):
            st.switch_page(ANALYZE_PAGE, query_params=link_params())
    if state in ("queued", "running"):
        cols[1].button(t("Cancel"), key=f"cancel-{job_id}", icon=":material/stop_circle:",
                       on_click=_cancel, args=(job_id,), width="stretch")
        return
    if st.session_state.get(K_CONFIRM) != job_id:
        cols[1].button(t("Delete…"), key=f"delete-{job_id}", icon=":material/delete:",
                       on_click=_ask_delete, args=(job_id,), width="stretch")
        return
    st.warning(t("Delete this analysis and its stored result? This cannot be undone."),
               icon=":material/warning:")
    yes, no = st.columns([1, 3])
    yes.button(t("Yes, delete"), key="confirm_delete", type="primary", on_click=_delete,
               args=(job_id, display_name(row)))
    no.button(t("Keep it"), key="cancel_delete", on_click=_ask_delete, args=(None,))


def _ask_delete(job_id: str | None) -> None:
    st.session_state[K_CONFIRM] = job_id


def _cancel(job_id: str) -> None:
    if not resources.job_manager().cancel(job_id):
        history_parents.cancel(job_id)  # a long run: its thread stops it


def _delete(job_id: str, name: str) -> None:
    st.session_state[K_CONFIRM] = None
    try:
        deleted = history_parents.delete(resources.job_manager(), job_id)
    except ChordError as exc:
        log.warning("deleting %s failed: %s", job_id, exc)
        st.session_state[K_NOTICE] = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
        return
    st.session_state[K_TABLE] = {"selection": {"rows": [], "columns": [], "cells": []}}
    if deleted:
        st.session_state[K_NOTICE] = t("Deleted the analysis of {name}.", name=name)
        log.info("deleted job %s from the store", job_id)


# -- open in Analyze -------------------------------------------------------------------------

def clip_for(row: dict[str, Any]) -> ClipSource:
    """The clip as the Analyze page keys it: an upload by its content hash, a local file by
    path/size/mtime; a clip whose file is gone gets a key of its own."""
    path, name = Path(row["video_path"]), display_name(row)
    if not servable(str(path)):  # gone, or outside the media roots: no frames, no preview
        return ClipSource(str(path), name, f"gone-{row['job_id']}", uploaded=False)
    if path.resolve().parent == uploads_dir().resolve():
        return ClipSource(str(path.resolve()), name, path.stem, uploaded=True)
    src = local_source(str(path))
    return ClipSource(src.path, name, src.key, uploaded=False)


def _stored_result(job_id: str) -> Result | None:
    doc = resources.store().get_result(job_id)
    try:
        return Result.from_dict(doc) if doc is not None else None
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("stored result of %s is unreadable: %s", job_id, exc)
        return None


def open_in_analyze(row: dict[str, Any]) -> bool:
    """Put the stored result where the Analyze page looks for it. False (with a message
    shown) when the stored result cannot be read."""
    result = _stored_result(row["job_id"])
    if result is None:
        show_error({"message": f"the stored result of {row['job_id']} could not be read",
                    "hint": "run the analysis again; the store may come from another "
                            "Chord version"})  # said in Chinese by chord_ui.messages
        return False
    clip = clip_for(row)
    st.session_state[K_CLIP] = clip
    st.session_state[K_CLIP_ERROR] = None
    st.session_state[K_TASK] = row["task"]
    st.session_state[K_TARGET if row["task"] == "ground" else K_PROMPT] = row["query"]
    elapsed = duration_s(row) or result.timing.total_s
    state = "cancelled" if row["state"] == "cancelled" else "done"  # cancelled: partial
    session.show_stored(clip, row["task"], session.Outcome(row["job_id"], state, result,
                                                           None, elapsed))
    return True
