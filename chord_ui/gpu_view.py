"""GPUs page body: the workers, a live table and 5-minute charts from the ONE shared sampler.

Every session reads the same ``GpuSampler`` (``resources.gpu_sampler``); a fragment rereads
it every ``REFRESH_S`` seconds. Each GPU's row and chart line is marked with the job its
worker runs now (from ``JobManager.workers()``). Without NVIDIA GPUs the page says why and
charts CPU and RAM.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import streamlit as st

from chord_ui import resources
from chord_ui.figures import history_figure
from chord_ui.formatting import human_duration, plot_escape
from chord_ui.i18n import t

REFRESH_S = 1.5
MIB_PER_GIB = 1024.0


def _series(samples: Sequence[Any], field: str, now: float, scale: float = 1.0
            ) -> list[tuple[float, float | None]]:
    """(seconds ago ≤ 0, value) points of one field."""
    out = []
    for s in samples:
        value = getattr(s, field)
        out.append((s.t - now, None if value is None else value / scale))
    return out


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def gpu_rows(gpus: Sequence[Any], labels: dict[int, str] | None = None
             ) -> list[dict[str, Any]]:
    """One table row per GPU (None where the device cannot tell). ``labels``: CUDA ordinal
    → the job running there (a label set on the sampler wins)."""
    labels = labels or {}
    rows = []
    for g in gpus:
        used = None if g.memory_used_mib is None else g.memory_used_mib / MIB_PER_GIB
        total = None if g.memory_total_mib is None else g.memory_total_mib / MIB_PER_GIB
        rows.append({
            "GPU": g.index, "name": g.name,
            "CUDA": "hidden" if g.cuda_ordinal is None else str(g.cuda_ordinal),
            "utilisation %": g.utilization_pct,
            "memory %": g.memory_pct,
            "memory": f"{_fmt(used, '.1f')} / {_fmt(total, '.0f')} GiB",
            "temp °C": g.temperature_c,
            "power": f"{_fmt(g.power_w, '.0f')} / {_fmt(g.power_limit_w, '.0f')} W",
            "processes": len(g.processes),
            "job": g.job or labels.get(g.cuda_ordinal, ""),
        })
    return rows


def process_rows(gpus: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"GPU": g.index, "pid": p.pid, "process": p.name or "?",
             "memory MiB": None if p.used_memory_mib is None else round(p.used_memory_mib)}
            for g in gpus for p in g.processes]


def _gpu_table(gpus: Sequence[Any], labels: dict[int, str]) -> None:
    pct = {"min_value": 0, "max_value": 100, "format": "%.0f %%"}
    st.dataframe(gpu_rows(gpus, labels), hide_index=True, column_config={
        **{k: t(k) for k in ("name", "memory", "temp °C", "power", "processes", "job")},
        "utilisation %": st.column_config.ProgressColumn(t("utilisation"), **pct),
        "memory %": st.column_config.ProgressColumn(t("memory used"), **pct),
    })


def series_names(gpus: Sequence[Any], labels: dict[int, str]) -> dict[int, str]:
    """Chart line name per NVML index: ``GPU 1 · clip.mp4 (ground)`` while a job runs."""
    names = {}
    for g in gpus:
        job = g.job or labels.get(g.cuda_ordinal, "")
        names[g.index] = f"GPU {g.index} · {plot_escape(job)}" if job else f"GPU {g.index}"
    return names


def _gpu_charts(history: dict[int, list[Any]], window_s: float, names: dict[int, str]
                ) -> None:
    now = time.time()
    items = [(names.get(i, f"GPU {i}"), s) for i, s in sorted(history.items())]
    util = {n: _series(s, "utilization_pct", now) for n, s in items}
    mem = {n: _series(s, "memory_used_mib", now, MIB_PER_GIB) for n, s in items}
    temp = {n: _series(s, "temperature_c", now) for n, s in items}
    power = {n: _series(s, "power_w", now) for n, s in items}
    a, b = st.columns(2)
    a.plotly_chart(history_figure(util, title=t("Utilisation"), y_title="%", y_range=(0, 100),
                                  window_s=window_s), key="gpu-util",
                   config={"displayModeBar": False})
    b.plotly_chart(history_figure(mem, title=t("Memory used"), y_title="GiB", window_s=window_s),
                   key="gpu-mem", config={"displayModeBar": False})
    c, d = st.columns(2)
    c.plotly_chart(history_figure(temp, title=t("Temperature"), y_title="°C", window_s=window_s),
                   key="gpu-temp", config={"displayModeBar": False})
    d.plotly_chart(history_figure(power, title=t("Power"), y_title="W", window_s=window_s),
                   key="gpu-power", config={"displayModeBar": False})


def _host(sampler: Any, window_s: float, *, heading: bool) -> None:
    latest = sampler.system_latest()
    if heading:
        st.subheader(t("Host"))
    if latest is None:
        st.caption(t("Collecting CPU/RAM readings…"))
        return
    m1, m2 = st.columns(2)
    m1.metric("CPU", _fmt(latest.cpu_pct, ".0f", " %"))
    m2.metric("RAM", f"{latest.ram_used_mib / MIB_PER_GIB:.1f} / "
                     f"{latest.ram_total_mib / MIB_PER_GIB:.1f} GiB")
    hist = sampler.system_history()
    now = time.time()
    a, b = st.columns(2)
    a.plotly_chart(history_figure({"CPU": _series(hist, "cpu_pct", now)}, title="CPU",
                                  y_title="%", y_range=(0, 100), window_s=window_s),
                   key="host-cpu", config={"displayModeBar": False})
    b.plotly_chart(history_figure({"RAM": _series(hist, "ram_used_mib", now, MIB_PER_GIB)},
                                  title=t("RAM used"), y_title="GiB",
                                  y_range=(0, latest.ram_total_mib / MIB_PER_GIB),
                                  window_s=window_s),
                   key="host-ram", config={"displayModeBar": False})


def job_label(manager: Any, job_id: str | None) -> str:
    """``clip.mp4 (ground)`` for a job the manager knows, else its id."""
    if not job_id:
        return ""
    try:
        spec = manager.status(job_id).spec
    except KeyError:
        return job_id
    return f"{spec.label or Path(spec.request.video_path).name} ({spec.request.task})"


def device_labels(workers: Sequence[dict[str, Any]], manager: Any) -> dict[int, str]:
    """CUDA ordinal → label of the job its worker runs now."""
    labels = {}
    for w in workers:
        label = job_label(manager, w.get("job"))
        for d in w.get("devices") or ():
            if label:
                labels[int(d)] = f"{label} on {w['worker']}"
    return labels


_NVML_REASONS = (  # chord_core.gpus.nvml's reasons, in the interface language
    (re.compile(r"^(?P<package>nvidia-ml-py) not installed \((?P<cmd>.+)\)$"),
     "{package} not installed ({cmd})"),
    (re.compile(r"^no NVIDIA GPU found$"), "no NVIDIA GPU found"),
    (re.compile(r"^NVML could not initialise: (?P<err>.+) \(no NVIDIA driver\?\)$",
                re.DOTALL), "NVML could not initialise: {err} (no NVIDIA driver?)"),
)


def nvml_reason(reason: str) -> str:
    """Why there is no GPU to chart, in the interface language (the error text NVML gave is
    quoted as it is)."""
    for pattern, text in _NVML_REASONS:
        m = pattern.match(reason or "")
        if m:
            return t(text, **m.groupdict())
    return reason


def worker_table_rows(workers: Sequence[dict[str, Any]], manager: Any) -> list[dict[str, Any]]:
    """One row per worker process: where it runs, its state, what it runs, what it did."""
    return [{"worker": w["worker"],
             "devices": ", ".join(f"cuda:{d}" for d in w.get("devices") or ()) or "CPU",
             "state": state_text(w), "job": job_label(manager, w.get("job")) or "—",
             "queued": w.get("queued", 0), "tasks done": w.get("tasks_done", 0),
             "busy": human_duration(float(w.get("busy_s") or 0.0)),
             "restarts": w.get("restarts", 0), "ready in": startup_text(w.get("startup")),
             "pid": w.get("pid")} for w in workers]


def state_text(w: dict[str, Any]) -> str:
    """A worker's state as the table shows it: what a starting (or background-warming)
    worker is doing and about how long it has left; a worker whose model could not be
    loaded is ``failed`` with the loader's message."""
    state = str(w["state"])
    error = w.get("error") or {}
    if state == "ready" and error and not w.get("model_loaded", True):
        return f"{t('failed')}: {error.get('message', '')}"
    warm = w.get("warming") or {}
    if not warm.get("detail"):
        return t(state)
    bits = [str(warm["detail"])]
    if warm.get("done") is not None and warm.get("total"):
        bits.append(f"{warm['done']}/{warm['total']}")
    if warm.get("left_s") is not None:
        bits.append(t("about {d} left", d=human_duration(float(warm["left_s"]))))
    return f"{t(state)} — " + "; ".join(bits)


def startup_text(startup: dict[str, float] | None) -> str:
    """Where a worker's start went: ``20.3 s (imports 4.9 s, weights 2.7 s, warm-up 11.8 s)``
    (imports = the worker's own plus the model loader's; warm-up includes compiling)."""
    if not startup or "total_s" not in startup:
        return "—"
    parts = [("imports", startup.get("imports_s", 0.0) + startup.get("load_imports_s", 0.0)),
             ("weights", startup.get("load_weights_s")), ("warm-up", startup.get("warmup_total_s"))]
    inner = ", ".join(f"{name} {human_duration(v)}" for name, v in parts if v)
    return f"{human_duration(startup['total_s'])} ({inner})" if inner else \
        human_duration(startup["total_s"])


def _workers(workers: Sequence[dict[str, Any]], manager: Any) -> None:
    st.subheader(t("Workers"))
    st.caption(t("Chord's model runs in {n} worker process(es); each loads the model once "
                 "and takes jobs from the shared queue.", n=len(workers)))
    st.dataframe(worker_table_rows(workers, manager), hide_index=True, key="workers-table",
                 column_config={k: t(k) for k in ("worker", "devices", "state", "job",
                                                  "queued", "tasks done", "busy", "restarts",
                                                  "ready in")})
    nodes = manager.nodes()
    if nodes:  # the workers run on a Ray cluster
        st.markdown(f"**{t('Cluster nodes')}**")
        st.dataframe([{"node": n["address"] + (" (head)" if n["head"] else ""),
                       "CPUs": n["cpus"], "GPUs": n["gpus"]} for n in nodes],
                     hide_index=True, key="nodes-table")
    cluster = resources.cluster()
    for note in cluster.notes:
        st.caption(f":material/info: {note}")
    with st.expander(t("Worker plan"), icon=":material/account_tree:"):
        for line in cluster.plan.lines:
            st.markdown(f"- {line}")


def dashboard() -> None:
    """The live GPU (or CPU/RAM) view; reruns itself every REFRESH_S seconds."""

    @st.fragment(run_every=REFRESH_S)
    def live() -> None:
        sampler = resources.gpu_sampler()
        window = float(getattr(sampler, "history_s", 300.0))
        manager = resources.job_manager()
        workers = manager.workers()
        labels = device_labels(workers, manager)
        if not sampler.available:
            st.info(t("No NVIDIA GPU to show: {reason}. Charting CPU and RAM instead.",
                      reason=nvml_reason(sampler.reason)), icon=":material/developer_board_off:")
            _workers(workers, manager)
            _host(sampler, window, heading=True)
            return
        gpus = sampler.latest()
        if not gpus:
            st.caption(t("Collecting the first GPU readings…"))
            _workers(workers, manager)
            return
        _gpu_table(gpus, labels)
        procs = process_rows(gpus)
        if procs:
            st.markdown("**" + t("Processes on the GPUs") + "**")
            st.dataframe(procs, hide_index=True)
        else:
            st.caption(t("No compute processes on the GPUs right now."))
        _workers(workers, manager)
        _gpu_charts(sampler.history(), window, series_names(gpus, labels))
        _host(sampler, window, heading=True)

    live()
