"""Batch: queue many uploads or a folder; per-clip progress, per-worker assignment, live
throughput and speed-up; a ZIP of the results when done.

Thin page: the clips run on the shared job manager's workers (one per GPU group, or CPU
workers); clips already analysed with the same settings are skipped, not run again.
"""

from __future__ import annotations

import streamlit as st

from chord_ui import batch_view, inputs
from chord_ui.i18n import t

batch_view.keep_model_choice()
model, model_ok, settings, plan_slot = inputs.run_sidebar()
plan_slot.caption(t("Each clip gets its own sampling plan when a worker picks it up."))

st.title(t("Batch"))
st.caption(t("Queue many clips with one task. They run on every worker at once; clips "
             "already analysed with the same settings are skipped."))
left, right = st.columns([5, 4], gap="large")
with left:
    clips = batch_view.clip_inputs()
with right:
    task, query = inputs.task_input(prefix="batch_")  # its own mode and text, not Analyze's
    batch_view.queue_button(clips, task, query, settings, model, model_ok)

batch_view.show_current()
