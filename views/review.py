"""Review: the alerts and detections of the watched folders, one by one, marked reviewed.

Thin page: chord_ui.review_view has the filters, the timeline, the keys and the case box.
"""

from __future__ import annotations

import streamlit as st

from chord_ui import review_view
from chord_ui.i18n import t

st.title(t("Review"))
st.caption(t("What the watched footage raised: alerts of standing checks and detections of "
             "watched targets, each marked reviewed once someone has looked."))
review_view.body()
