"""Long-lived, per-server objects. The ONLY module that uses ``st.cache_resource``.

Each is created once per Streamlit server process and shared by every session:
the job runner (which owns the loaded model), the GPU sampler (one background thread) and
the model download manager. Pages call their thread-safe methods; they never set attributes
on them or replace them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import streamlit as st

if TYPE_CHECKING:
    from chord_core.gpu import GpuSampler
    from chord_core.jobs import JobRunner
    from chord_ui.downloads import DownloadManager

log = logging.getLogger(__name__)

GPU_SAMPLE_INTERVAL_S = 1.0
GPU_HISTORY_S = 300.0


@st.cache_resource(show_spinner=False)
def job_runner() -> JobRunner:
    """The in-process job runner: one worker thread, one engine, the model loaded once."""
    from chord_core.config import model_config_from_env
    from chord_core.jobs import JobRunner

    cfg = model_config_from_env()
    log.info("starting job runner (default model %s)", cfg.model)
    return JobRunner(cfg)


@st.cache_resource(show_spinner=False)
def gpu_sampler() -> GpuSampler:
    """One background sampler (NVML, psutil) for the whole server; 5 minutes of history."""
    from chord_core.gpu import shared_sampler

    return shared_sampler(interval_s=GPU_SAMPLE_INTERVAL_S, history_s=GPU_HISTORY_S)


@st.cache_resource(show_spinner=False)
def downloads() -> DownloadManager:
    """Model downloads shared by all sessions (a download outlives the tab that began it)."""
    from chord_ui.downloads import DownloadManager

    return DownloadManager()
