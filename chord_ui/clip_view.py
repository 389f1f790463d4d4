"""The clip column: probe + sampling plan (cached, no model), preview player, probe facts."""

from __future__ import annotations

import logging
from dataclasses import astuple
from pathlib import Path

import streamlit as st

from chord_core.config import SamplingConfig
from chord_core.errors import ChordError, VideoError
from chord_core.types import SamplingPlan, VideoInfo
from chord_ui.formatting import human_bytes, md_escape, plan_summary, video_facts
from chord_ui.uploads import ClipSource, browser_playable, servable

log = logging.getLogger(__name__)

PREVIEW_MAX_BYTES = 1 << 30


@st.cache_data(show_spinner=False, max_entries=128)
def _plan(path: str, clip_key: str, task: str, sampling: tuple) -> tuple[VideoInfo, SamplingPlan]:
    from chord_core.analysis.request import plan

    return plan(path, task, SamplingConfig(*sampling))


def probe_and_plan(clip: ClipSource, task: str, sampling: SamplingConfig
                   ) -> tuple[VideoInfo, SamplingPlan]:
    """Probe the clip and plan its sampling. Raises ChordError with a readable message,
    also for failures the probe did not foresee (a bad file must never crash the page)."""
    try:
        return _plan(clip.path, clip.key, task, astuple(sampling))
    except ChordError:
        raise
    except Exception as exc:  # noqa: BLE001 — turned into a readable error for the page
        log.exception("probing %s failed", clip.path)
        raise VideoError(f"{clip.name} could not be read as a video ({type(exc).__name__}: "
                         f"{exc})", hint="check that the file is a complete video; re-encode "
                         "it with ffmpeg -i in.ext -c:v libx264 out.mp4 if needed") from exc


def show_clip(clip: ClipSource, info: VideoInfo | None) -> None:
    """Preview player (when the browser can play it) and the probe facts."""
    ok = servable(clip.path)  # nothing outside the media roots/uploads reaches /media
    size = Path(clip.path).stat().st_size if ok else 0
    if info is not None and ok and size <= PREVIEW_MAX_BYTES:
        st.video(clip.path)
        if not browser_playable(clip.path):
            st.caption(f"{Path(clip.path).suffix} files may not play in the browser; "
                       "analysis is not affected.")
    elif info is not None:
        st.caption("Preview skipped for files over 1 GiB; analysis reads the file directly.")
    if info is None:
        st.caption(f"**{md_escape(clip.name)}** · "
                   f"{'uploaded' if clip.uploaded else 'local file'}")
        return
    st.caption(f"**{md_escape(clip.name)}** · {'uploaded' if clip.uploaded else 'local file'}"
               f" · {human_bytes(size)}")
    st.markdown(" · ".join(f"{label} **{md_escape(value)}**"
                           for label, value in video_facts(info)))  # codec names come from the file
    for warning in info.warnings:
        st.caption(f":material/warning: {md_escape(warning)}")


def show_plan(plan: SamplingPlan) -> None:
    """The plan line before running (and its notes)."""
    st.markdown(f":material/grid_view: **Plan:** {plan_summary(plan)}")
    for note in plan.notes:
        st.caption(md_escape(note))
