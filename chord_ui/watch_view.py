"""Watch folders and standing checks set in the app (the Library page), with their state.

Before, only ``CHORD_WATCH`` / ``CHORD_WATCH_CHECKS`` could set them. A form adds one: the
folder (under the media roots), the task and its query, statements checked on every clip
(one a line) and the alert threshold; it is saved in the job store's file
(chord_core.library.watch_saved, checked there) and runs in this server's own process from
then on, and again after a restart (``start_saved`` on every page: app.py). Each saved
watch shows whether it runs here, its files done / failed / in work, checks waiting and
alerts raised, and a Remove button (its results and alerts are kept).
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import resources
from chord_ui.formatting import md_escape
from chord_ui.i18n import choice_key, t

log = logging.getLogger(__name__)

TASKS = ("describe", "ground", "entail")


_started = False  # this process has run saved watches (then a last removal must stop one)


def start_saved() -> None:
    """Run the saved watches in this process (once each; a removed one is stopped). Until a
    watch is saved, nothing starts: not even the workers."""
    global _started
    from chord_core.library.watch_saved import saved_watches

    try:
        rows = saved_watches(resources.library_index())
    except ChordError as exc:
        log.warning("saved watches unreadable: %s", exc.message)
        return
    if rows or _started:
        try:
            resources.app_watches().sync(rows)
        except ChordError as exc:  # a bad CHORD_WATCH: start_watches says it in the sidebar
            log.warning("saved watches not started: %s", exc.message)
            return
        _started = True


def _add(folder: str, task: str, query: str, statements: str, threshold: float) -> None:
    from chord_core.library.watch_saved import save_watch

    try:
        row = save_watch(resources.library_index(), folder, task, query,
                         statements.splitlines(), threshold)
    except ChordError as exc:
        st.session_state["watch_form_error"] = f"{exc.message}  \n{exc.hint}"
        return
    st.session_state.pop("watch_form_error", None)
    st.toast(t("Watching {folder}.", folder=row["folder"]), icon=":material/folder_eye:")
    st.rerun()  # the list above the form shows it, and app.py starts it


def _remove(saved_id: int) -> None:
    from chord_core.library.watch_saved import remove_watch

    remove_watch(resources.library_index(), saved_id)


def add_form() -> None:
    """The form that saves a watch."""
    with st.form("watch-add", border=True):
        st.markdown(t("**Watch a folder**"))
        folder = st.text_input(t("Folder"), max_chars=500, key="watch-folder",
                               help=t("A folder under the media roots; new clips in it are "
                                      "analysed as they settle"))
        cols = st.columns([1, 3, 1])
        task = cols[0].selectbox(t("Task"), TASKS, format_func=t, key=choice_key("watch-task"))
        query = cols[1].text_input(t("Target or statement of the task"), max_chars=200,
                                   key="watch-query",
                                   help=t("What to find (ground) or check (entail)"))
        threshold = cols[2].number_input(t("Alert at P ≥"), 0.05, 1.0, 0.8, 0.05,
                                         key="watch-threshold")
        statements = st.text_area(t("Standing checks, one a line"), key="watch-statements",
                                  placeholder=t("a person climbs the fence"), max_chars=2200)
        if st.form_submit_button(t("Watch"), icon=":material/add:", type="primary"):
            _add(folder, task, query, statements, float(threshold))
    error = st.session_state.get("watch_form_error")
    if error:
        st.error(md_escape(error), icon=":material/error:")


def _state_line(row: dict[str, Any]) -> str:
    from chord_core.library.watch_saved import watch_state

    try:
        runner = resources.app_watches()
    except ChordError as exc:  # CHORD_WATCH is wrong: nothing is started beside it
        return t("Not running: {why}", why=md_escape(exc.message))
    if int(row["id"]) in runner.errors:
        return t("Not running: {why}", why=md_escape(runner.errors[int(row["id"])]))
    watch = runner.watch_id(int(row["id"]))
    if watch is None:
        return t("Not running in this process")
    s = watch_state(resources.library_index(), watch)
    return t("Running · {done} clip(s) done · {error} failed · {working} in work · "
             "{checks} check(s) waiting · {alerts} alert(s)", **s)


def saved_list() -> None:
    """Every saved watch with its state and a Remove button."""
    from chord_core.library.watch_saved import saved_watches

    rows = saved_watches(resources.library_index())
    if not rows:
        st.caption(t("No folder is watched from here yet."))
        return
    for row in rows:
        with st.container(border=True, key=f"watch-saved-{row['id']}"):
            left, right = st.columns([5, 1], vertical_alignment="center")
            what = t(row["task"]) + (f" · {md_escape(row['query'])}" if row["query"] else "")
            left.markdown(f"**{md_escape(row['folder'])}** · {what}")
            if row["statements"]:
                left.caption(t("Checks (P ≥ {p}): {statements}", p=f"{row['threshold']:.2f}",
                               statements=md_escape("; ".join(row["statements"]))))
            left.caption(_state_line(row))
            right.button(t("Remove"), key=f"watch-remove-{row['id']}", icon=":material/delete:",
                         on_click=_remove, args=(int(row["id"]),))


def watch_section() -> None:
    """The Library page's section: saved watches, then the form."""
    st.subheader(t("Watched folders"))
    saved_list()
    add_form()
