"""Live progress of a running job, polled by a fragment; and the compact GPU/CPU strip.

The analysis runs in the job runner's worker thread; this fragment only reads
``runner.status(job_id)`` every second, so the page never freezes. When the job finishes the
fragment asks for one full rerun, which files the outcome and shows the results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from chord_ui import resources
from chord_ui.formatting import human_duration, md_escape, progress_fraction, stage_text

if TYPE_CHECKING:
    from chord_core.runtime.jobs import JobStatus

POLL_S = 1.0
MIB_PER_GIB = 1024.0


def _cancel(job_id: str) -> None:
    resources.job_runner().cancel(job_id)


def job_progress(job_id: str) -> None:
    """Stage, progress bar, elapsed time and Cancel, beside a live resource strip."""

    @st.fragment(run_every=POLL_S)
    def poll() -> None:
        status = resources.job_runner().status(job_id)
        if status.state.finished:
            st.rerun()
        with st.container(border=True):
            left, right = st.columns([3, 2], gap="medium")
            with left:
                st.markdown(f"**{md_escape(_headline(status))}**")
                st.progress(progress_fraction(status.events, status.state.value))
                st.caption(f"Elapsed {human_duration(status.elapsed_s)}")
                st.button("Cancel", key=f"cancel-{job_id}", on_click=_cancel, args=(job_id,),
                          icon=":material/stop_circle:")
            with right:
                resource_strip()

    poll()


def _headline(status: JobStatus) -> str:
    """Stage line; before the first event a running job is loading its model."""
    event = status.last_event
    if event is None and status.state.value == "running":
        model_state = resources.job_runner().model_state()
        if model_state.get("state") == "loading":
            return f"Loading model {model_state.get('model') or ''}".strip()
    return stage_text(event, status.state.value)


def resource_strip() -> None:
    """GPU utilisation and memory per GPU (CPU and RAM when there is no NVIDIA GPU)."""
    sampler = resources.gpu_sampler()
    gpus = sampler.latest()
    if gpus:
        for g in gpus:
            util = g.utilization_pct
            st.progress(min(1.0, (util or 0) / 100),
                        text=f"GPU {g.index} · {'n/a' if util is None else f'{util:.0f} %'}")
            if g.memory_total_mib:
                used = (g.memory_used_mib or 0) / MIB_PER_GIB
                total = g.memory_total_mib / MIB_PER_GIB
                st.progress(min(1.0, used / total),
                            text=f"memory {used:.1f} / {total:.0f} GiB")
        return
    sys = sampler.system_latest()
    if sys is None:
        st.caption("Collecting CPU/RAM readings…")
        return
    cpu = sys.cpu_pct or 0.0
    st.progress(min(1.0, cpu / 100), text=f"CPU · {cpu:.0f} % (no NVIDIA GPU)")
    ram_pct = sys.ram_pct or 0.0
    st.progress(min(1.0, ram_pct / 100), text=f"RAM {sys.ram_used_mib / MIB_PER_GIB:.1f} / "
                f"{sys.ram_total_mib / MIB_PER_GIB:.1f} GiB")
