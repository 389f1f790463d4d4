"""Jobs bound to the page's URL: ``?job=<id>``.

While the Analyze page shows a job (running or finished) its id is in the URL, so a reload,
a second tab or a shared link comes back to the same job: the clip, the mode and its text
are restored from the job's spec (the live job manager, else the store), and the page follows
the job's progress or shows its result. A long-video run is a parent job: its link restores
the clip and mode, and the long view finds the run (running, or finished: its chapters, and
its last search) by the same id. The id is only ever used as a lookup key.
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from chord_ui import resources, session
from chord_ui.formatting import md_escape
from chord_ui.i18n import t
from chord_ui.inputs import (
    K_CLIP,
    K_CLIP_ERROR,
    K_PROMPT,
    K_STATEMENT,
    K_TARGET,
    K_TASK,
    TASKS,
)

log = logging.getLogger(__name__)

PARAM = "job"
K_BOUND = "url_job"
QUERY_KEYS = {"ground": K_TARGET, "entail": K_STATEMENT, "describe": K_PROMPT}


def _job_row(job_id: str) -> dict[str, Any] | None:
    """The job as a store-like row (video_path, task, query, spec label), live or stored."""
    try:
        spec = resources.job_manager().status(job_id).spec
    except KeyError:
        return resources.store().get_job(job_id)
    req = spec.request
    return {"job_id": job_id, "video_path": req.video_path, "task": req.task,
            "query": req.query, "spec": {"label": spec.label}}


def restore() -> None:
    """If the URL names a job this session has not opened yet, open it: its clip, mode and
    text become the page's, and the job is filed as that clip's current job."""
    from chord_ui.history_view import clip_for

    job_id = str(st.query_params.get(PARAM) or "")[:80]
    if not job_id or st.session_state.get(K_BOUND) == job_id:
        return
    st.session_state[K_BOUND] = job_id
    row = _job_row(job_id)
    if _open_parent(row):
        return
    if _names_a_batch(row):
        st.session_state["job_link_batch"] = job_id
        del st.query_params[PARAM]
        return
    if row is None or row.get("task") not in TASKS:
        log.info("the link's job %r is not known here", job_id)
        st.session_state["job_link_missing"] = job_id
        del st.query_params[PARAM]
        return
    clip = clip_for(row)
    task = row["task"]
    st.session_state[K_CLIP] = clip
    st.session_state[K_CLIP_ERROR] = None
    st.session_state[K_TASK] = task
    st.session_state[QUERY_KEYS[task]] = row.get("query") or ""
    session.follow(clip, task, job_id)
    _seek_from_url(job_id)
    log.info("opened %s from the page's URL", job_id)


def _seek_from_url(job_id: str) -> None:
    """``&t=SECONDS`` (a Library hit's moment): the result's player opens there, not at 0."""
    from chord_ui.player import seek_to

    raw = str(st.query_params.get("t") or "")[:16]
    try:
        t_s = float(raw)
    except ValueError:
        return
    if 0.0 < t_s < 7 * 86400.0:
        seek_to(job_id, t_s)


def _open_parent(row: dict[str, Any] | None) -> bool:
    """A long run's link: its clip and mode (a search opens in its chapters run). False when
    the row is not a parent job."""
    from chord_ui.history_parents import is_long_video
    from chord_ui.history_view import clip_for

    if row is None or not is_long_video(row):  # a batch's link names one of its clips
        return False
    if row["task"] == "search" and row.get("parent"):
        row = resources.store().get_job(row["parent"]) or row
    task = str(row["spec"].get("task") or "describe")
    st.session_state[K_CLIP] = clip_for(row)
    st.session_state[K_CLIP_ERROR] = None
    st.session_state[K_TASK] = task if task in TASKS else "describe"
    if task == "ground":
        st.session_state[K_TARGET] = row.get("query") or ""
    log.info("opened the long run %s from the page's URL", row["job_id"])
    return True


def _names_a_batch(row: dict[str, Any] | None) -> bool:
    """A batch's own id (a parent job that is not a long run): it has no one clip to open,
    so Analyze says where its clips are instead of opening it as a long-video run."""
    from chord_ui.history_parents import is_long_video, is_parent

    return row is not None and is_parent(row) and not is_long_video(row)


def bind(job_id: str | None) -> None:
    """Put the shown job's id in the URL (or take it out when no job is shown)."""
    if job_id:
        if st.query_params.get(PARAM) != job_id:
            st.query_params[PARAM] = job_id
        st.session_state[K_BOUND] = job_id
    elif PARAM in st.query_params:
        del st.query_params[PARAM]


def missing_notice() -> None:
    """Say once that a link named a batch (its clips are in History) or a job this Chord
    does not know (deleted, other machine)."""
    batch = st.session_state.pop("job_link_batch", None)
    if batch:
        st.info(t("The link names a batch ({job}), not one clip: its clips and their results "
                  "are in History, inside the batch's row.", job=md_escape(batch)),
                icon=":material/video_library:")
    job_id = st.session_state.pop("job_link_missing", None)
    if job_id:
        st.warning(t("The link names a job this Chord does not know ({job}): it may have been "
                     "deleted. Start a new analysis below.", job=md_escape(job_id)),
                   icon=":material/link_off:")


def offer_same_job(clip: Any, task: str, query: str, settings: Any, model: str) -> None:
    """The same clip with the same settings is already running, queued or done (this tab
    or any other, before a restart too): offer that job instead of a second one."""
    from chord_core.errors import ChordError

    try:
        key = session.request_key(clip, task, query, settings, model)
    except (ChordError, OSError):
        return  # an invalid request: Run says why
    same = session.same_job(key)
    if same is None:
        return
    job_id, state = same
    text = (t("This clip was already analysed with these settings.") if state == "done"
            else t("This clip is being analysed with these settings right now."))
    with st.container(border=True, key="same-job"):
        st.markdown(f":material/content_copy: {text}")
        st.button(t("Show that result") if state == "done" else t("Follow that job"),
                  key="follow-same", icon=":material/open_in_new:", on_click=session.follow,
                  args=(clip, task, job_id))
