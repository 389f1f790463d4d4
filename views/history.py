"""History: past analyses (newest first) from the job store; open any in the Analyze views,
read why one failed, or delete it.

Thin page: the store survives restarts; "Open in Analyze" shows the stored result there.
"""

from __future__ import annotations

import streamlit as st

from chord_ui import history_view
from chord_ui.i18n import t

st.title(t("History"))
st.caption(t("Analyses from the Analyze and Batch pages, and from `chord batch` runs that "
             "use the same data folder."))
history_view.history()
