"""Library: search across every clip analysed so far (the FTS5 index in the job store).

Thin page: chord_ui.library_view has the form, the cards and the index footer.
"""

from __future__ import annotations

import streamlit as st

from chord_ui import ask_view, library_view, watch_view
from chord_ui.i18n import t

st.title(t("Library"))
st.caption(t("Every clip analysed so far, searchable: descriptions, chapters, grounding "
             "targets, statements, file names."))
library_view.search_form()
library_view.results()
st.divider()
ask_view.ask_box()
st.divider()
library_view.alerts_section()
st.divider()
watch_view.watch_section()
st.divider()
library_view.index_footer()
