"""Analyze: upload a clip, describe it or find a target in it, and explore the result.

Thin page: widgets → chord_core (through chord_ui) → render. The analysis runs in the shared
job manager's workers; this page only submits and polls. The job shown is kept in the URL
(``?job=``), so a reload or a shared link comes back to it.
"""

from __future__ import annotations

import time

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import (
    clip_view,
    inputs,
    job_link,
    long_view,
    progress,
    resources,
    results,
    session,
)
from chord_ui.i18n import lang, t
from chord_ui.wording import plan_numbers

job_link.restore()  # before any widget: a ?job= link sets the clip, mode and text
model, model_ok, settings, plan_slot = inputs.run_sidebar()

st.title(t("Analyze a clip"))
job_link.missing_notice()
# even halves: at 1280 px the mode control's three choices fit ("Check a statement" was
# cut off in a 4/9 column)
left, right = st.columns(2, gap="medium")

with left:
    clip = inputs.clip_input()
    info = plan = None
with right:
    task, query = inputs.task_input()

if clip is not None:
    try:
        info, plan = clip_view.probe_and_plan(clip, task, settings.sampling(task))
    except ChordError as exc:
        if session.current_outcome(clip.key, task) is None:
            inputs.refuse_clip(clip, exc)  # one message, in the clip column; Run turns off
            st.rerun()
        # a stored result whose clip is gone: the results below say so and still show it
    with left:
        clip_view.show_clip(clip, info)

long_clip = long_view.is_long(info, task)  # past the threshold: chapters / long grounding
outcome = session.current_outcome(clip.key, task) if clip is not None and not long_clip \
    else None
running = outcome is not None and not outcome.finished
job_link.bind(long_view.shown_job(clip, task, query, model) if long_clip  # a parent job
              else outcome.job_id if outcome is not None else None)

with right:
    if plan is not None and not long_clip:  # a long clip's run panel says what will run
        clip_view.show_plan(plan, info)
        plan_slot.caption(t("Plan: {numbers}", numbers=plan_numbers(plan, lang())))
    elif clip is None:
        st.caption(t("Upload a clip or give a path to see the sampling plan."))
    if not model_ok:
        st.caption(":material/info: " + t("Choose a model that is available (sidebar) to run."))
    if long_clip:
        long_view.run_panel(clip, info, task, query, model, model_ok)
    elif outcome is None and plan is not None and model_ok and model is not None:
        job_link.offer_same_job(clip, task, query, settings, model)
    no_target = task != "describe" and not query.strip()
    if no_target and plan is not None:
        st.caption(":material/info: " + (t("Type what to look for to run.") if task == "ground"
                                         else t("Type the statement to check to run.")))
    if not long_clip and st.button(
            t("Run"), type="primary", icon=":material/play_arrow:", key="run",
            disabled=plan is None or not model_ok or running or model is None or no_target):
        try:
            clicked = time.time()
            job_id = session.submit(clip, task, query, settings, model)
        except ChordError as exc:
            inputs.show_error(exc)
        else:  # the same clip and settings: that job, not a new one — say so
            again = resources.job_manager().status(job_id).submitted_at < clicked
            st.session_state["chord-reused"] = job_id if again else None
            st.rerun()
    if outcome is not None and st.session_state.get("chord-reused") == outcome.job_id:
        st.info(t("Same clip, same settings: this is the earlier run's result, not a new "
                  "analysis. Change a setting to analyse it again."),
                icon=":material/content_copy:")
    if running:
        progress.job_progress(outcome.job_id, plan)

if long_clip:
    long_view.show_results(clip, info, task, query, model)
elif outcome is not None and not running:
    st.divider()
    results.show_outcome(outcome, clip)
