"""GPUs: live utilisation, memory, temperature and power, with 5 minutes of history.

All sessions read one background sampler (chord_core.gpus.sampler, cached per server); without NVIDIA
GPUs the page says why and charts CPU and RAM instead.
"""

from __future__ import annotations

import streamlit as st

from chord_ui import gpu_view
from chord_ui.i18n import t

st.title(t("GPUs"))
st.caption(t("Live readings every {s} s from one sampler shared by every session; charts "
             "show the last 5 minutes.", s=f"{gpu_view.REFRESH_S:g}"))
gpu_view.dashboard()
