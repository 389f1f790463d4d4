"""Live: watch RTSP cameras and streams — their state, recordings, descriptions and alerts."""

from __future__ import annotations

import streamlit as st

from chord_ui import live_view
from chord_ui.i18n import t

st.title(t("Live"))
st.caption(t("Each stream is recorded into segments (kept by age and size) and analysed chunk "
             "by chunk; an alert plays from its moment. Stopping a stream keeps its results."))
live_view.start_form()
live_view.streams()
