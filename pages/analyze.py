"""Analyze: upload a clip, describe it or find a target in it, and explore the result.

Thin page: widgets → chord_core (through chord_ui) → render. The analysis runs in the shared
job runner's worker thread; this page only submits and polls.
"""

from __future__ import annotations

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import clip_view, inputs, progress, results, session
from chord_ui.formatting import plan_summary

model, model_ok, settings, plan_slot = inputs.run_sidebar()

st.title("Analyze a clip")
left, right = st.columns([5, 4], gap="large")

with left:
    clip = inputs.clip_input()
    info = plan = None
with right:
    task, query = inputs.task_input()

if clip is not None:
    try:
        info, plan = clip_view.probe_and_plan(clip, task, settings.sampling(task))
    except ChordError as exc:
        with left:
            inputs.show_error(exc)
        if clip.uploaded:  # a refused upload is deleted, not kept
            inputs.refuse_clip(clip, exc)
    with left:
        clip_view.show_clip(clip, info)

outcome = session.current_outcome(clip.key, task) if clip is not None else None
running = outcome is not None and not outcome.finished

with right:
    if plan is not None:
        clip_view.show_plan(plan)
        plan_slot.caption(f"Plan: {plan_summary(plan)}")
    elif clip is None:
        st.caption("Upload a clip or give a path to see the sampling plan.")
    if not model_ok:
        st.caption(":material/info: Choose a model that is available (sidebar) to run.")
    if st.button("Run", type="primary", icon=":material/play_arrow:", key="run",
                 disabled=plan is None or not model_ok or running or model is None):
        try:
            session.submit(clip, task, query, settings, model)
        except ChordError as exc:
            inputs.show_error(exc)
        else:
            st.rerun()
    if running:
        progress.job_progress(outcome.job_id)

if outcome is not None and not running:
    st.divider()
    results.show_outcome(outcome, clip)
