"""Live progress of a running job, polled by a fragment; and the compact GPU/CPU strip.

The analysis runs in a worker process; this fragment only reads the manager's status every
second, so the page never freezes. It shows the stage, a bar that moves with time once the
time left is known (``chord_ui.eta``: the plan's whole cost learned from finished jobs, or
the last frame loop's own rate; counting down between events), the queue position of a
queued job, and Cancel. When the job finishes the fragment asks for one full rerun, which files the outcome
and shows the results.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import streamlit as st

from chord_ui import resources
from chord_ui.eta import Rate, counted_down, learn_rates, left_at_event
from chord_ui.formatting import human_duration, md_escape, progress_fraction
from chord_ui.i18n import lang, t
from chord_ui.stages import stage_line
from chord_ui.wording import progress_value, queue_position

if TYPE_CHECKING:
    from chord_core.runtime.jobs import JobStatus

POLL_S = 1.0
MIB_PER_GIB = 1024.0


def _cancel(job_id: str) -> None:
    resources.job_manager().cancel(job_id)


@st.cache_data(ttl=60, show_spinner=False)
def learned_rates() -> dict[tuple[str, str], Rate]:
    """Cost per visual token by (model, task), from the store's latest finished jobs."""
    store = resources.store()
    docs = (store.get_result(j["job_id"]) for j in store.list_jobs(limit=40, state="done"))
    return learn_rates(d for d in docs if d)


def _left_now(status: JobStatus, plan: Any) -> float | None:
    """Time left now: the estimate as of the latest event, counted down since the page
    first saw that event."""
    task = status.spec.request.task
    model = status.spec.model or ""
    rate = learned_rates().get((model, task))
    tokens = int(getattr(plan, "visual_tokens", 0) or 0)
    left = left_at_event(status.events, task, tokens, rate)
    seen = st.session_state.setdefault("eta-seen", {})
    mark = (status.job_id, len(status.events))
    if mark not in seen:
        seen.clear()
        seen[mark] = time.time()
    return counted_down(left, seen[mark])


def job_progress(job_id: str, plan: Any = None) -> None:
    """Stage, progress bar, elapsed time and time left, Cancel, beside a resource strip.
    ``plan`` (the job's SamplingPlan) sizes the estimate before the job has measured itself."""

    @st.fragment(run_every=POLL_S)
    def poll() -> None:
        manager = resources.job_manager()
        status = manager.status(job_id)
        if status.state.finished and not status.settling:
            st.rerun()
        left_s = None if status.state.value == "queued" else _left_now(status, plan)
        with st.container(border=True, key="job-progress"):
            left, right = st.columns([3, 2], gap="medium")
            with left:
                st.markdown(f"**{md_escape(_headline(status))}**")
                fraction = progress_fraction(status.events, status.state.value)
                st.progress(progress_value(fraction, status.elapsed_s, left_s))
                st.caption(_times(status, left_s, manager))
                if not status.state.finished:
                    st.button(t("Cancel"), key=f"cancel-{job_id}", on_click=_cancel,
                              args=(job_id,), icon=":material/stop_circle:")
            with right:
                resource_strip()

    poll()


def _times(status: JobStatus, left_s: float | None, manager: object) -> str:
    if status.state.value == "queued":
        place = queue_position(status.job_id, manager.jobs())
        if place is None or place == 1:
            return t("Next in line: waiting for a free worker")
        return t("In the queue: {n} job(s) ahead of this one", n=place - 1)
    text = t("Elapsed {elapsed}", elapsed=human_duration(status.elapsed_s))
    if left_s is not None:
        text += " · " + t("about {left} left", left=human_duration(left_s))
    else:
        text += " · " + t("estimating the time left…")
    return text


def _headline(status: JobStatus) -> str:
    """Stage line; before the first event a running job is loading its model."""
    if status.settling:
        return t("Cancelled — keeping the frames finished so far…")
    event = status.last_event
    if event is None and status.state.value == "running":
        model_state = resources.job_manager().model_state()
        if model_state.get("state") == "loading":
            return t("Loading model {model}", model=model_state.get("model") or "").strip()
    return stage_line(event, status.state.value, lang())


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
                            text=t("memory {used} / {total} GiB", used=f"{used:.1f}",
                                   total=f"{total:.0f}"))
        return
    sys = sampler.system_latest()
    if sys is None:
        st.caption(t("Collecting CPU/RAM readings…"))
        return
    cpu = sys.cpu_pct or 0.0
    st.progress(min(1.0, cpu / 100), text=t("CPU · {pct} % (no NVIDIA GPU)", pct=f"{cpu:.0f}"))
    ram_pct = sys.ram_pct or 0.0
    st.progress(min(1.0, ram_pct / 100), text=t("RAM {used} / {total} GiB",
                used=f"{sys.ram_used_mib / MIB_PER_GIB:.1f}",
                total=f"{sys.ram_total_mib / MIB_PER_GIB:.1f}"))
