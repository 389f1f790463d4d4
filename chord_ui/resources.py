"""Long-lived, per-server objects. The ONLY module that uses ``st.cache_resource``.

Each is created once per Streamlit server process and shared by every session:

* the job store (SQLite in the data dir: history and batches survive restarts), as a
  read-only ``StoreView``: pages read through it, the job manager writes it (the manager
  is started on the view's store; History's delete is ``job_manager().parents.delete``);
* the job manager with its worker processes — one per planned GPU group, or CPU workers on
  a machine without GPUs (``CHORD_CPU_WORKERS``). The model is loaded in the workers, never
  in the Streamlit process; the workers are stopped when the server exits;
* the GPU sampler (one background thread) and the model download manager.

Pages call their thread-safe methods; they never set attributes on them or replace them.
"""

from __future__ import annotations

import atexit
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import streamlit as st

from chord_core.config import env_value

if TYPE_CHECKING:
    from chord_core.config import ModelConfig
    from chord_core.gpus.sampler import GpuSampler
    from chord_core.runtime.cluster import WorkerPlan
    from chord_core.runtime.manager import JobManager
    from chord_core.runtime.parallel_config import ParallelConfig
    from chord_core.runtime.store_read import StoreView
    from chord_ui.downloads import DownloadManager
    from chord_ui.long_runs import LongRunManager
    from chord_ui.renders import RenderManager

log = logging.getLogger(__name__)

GPU_SAMPLE_INTERVAL_S = 1.0
GPU_HISTORY_S = 300.0
SHUTDOWN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Cluster:
    """The job manager, the plan it was started from, and notes for the GPUs page."""

    manager: JobManager
    plan: WorkerPlan
    startup_model: str
    notes: tuple[str, ...] = ()


@st.cache_resource(show_spinner=False)
def store() -> StoreView:
    """The SQLite job store in the data dir (``CHORD_DATA_DIR``), read-only: the manager
    (``cluster``) is started on it and is its one writer."""
    from chord_core.runtime.store_read import StoreView

    return StoreView.open()


def _startup_model(cfg: ModelConfig) -> tuple[ModelConfig, str]:
    """Workers load a model when they start. If the configured one is not on this machine
    they start on the tiny test model instead (never a silent multi-GB download); a job
    that names a model makes its worker load that one."""
    from chord_core.config import TEST_MODEL, TEST_MODELS
    from chord_core.model.hub import model_availability

    if cfg.model in TEST_MODELS:
        return cfg, ""
    avail = model_availability(cfg.model)
    if avail.available:
        return cfg, ""
    why = (avail.message or "not on this machine").split(";")[0]
    note = (f"{cfg.model} is not available here ({why}): workers started on the test model "
            f"and load {cfg.model} when a job asks for it once it is downloaded.")
    log.warning("%s", note)
    return replace(cfg, model=TEST_MODEL), note


def _parallel_config() -> tuple[ParallelConfig, str]:
    """Multi-GPU settings (``CHORD_PARALLEL_CONFIG`` file, ``CHORD_*`` variables); invalid
    settings fall back to the defaults with a note instead of stopping the app."""
    from chord_core.errors import ChordError
    from chord_core.runtime.parallel_config import ParallelConfig, load_parallel_config

    try:
        return load_parallel_config(env_value("CHORD_PARALLEL_CONFIG") or None), ""
    except ChordError as exc:
        note = f"Parallel settings ignored ({exc.message}); using the defaults." + (
            f" How to fix: {exc.hint}" if exc.hint else "")
        log.warning("%s", note)
        return ParallelConfig(), note


def _stop(manager: Any) -> None:
    """Stop the worker processes (idempotent: atexit and cache release may both call it)."""
    try:
        manager.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
    except (OSError, ValueError, RuntimeError) as exc:  # queues already closed at exit
        log.warning("stopping the job manager: %s", exc)


def _release(cluster_: Cluster) -> None:
    _stop(cluster_.manager)


@st.cache_resource(show_spinner=False, on_release=_release)
def cluster() -> Cluster:
    """Plan the workers and start them (one JobManager per server)."""
    from chord_core.config import model_config_from_env
    from chord_core.runtime.cluster import start_manager
    from chord_ui.quiet_logs import quiet_worker_warnings

    quiet_worker_warnings(worker_process=False)  # the manager's threads have no session
    cfg, model_note = _startup_model(model_config_from_env())
    parallel, parallel_note = _parallel_config()
    manager, plan = start_manager(cfg, parallel, store=store(),
                                  executor=env_value("CHORD_EXECUTOR") or "local",
                                  ray_address=env_value("CHORD_RAY_ADDRESS") or "auto")
    atexit.register(_stop, manager)
    log.info("job manager started: %d worker(s) on %s", len(plan.specs), cfg.model)
    notes = tuple(n for n in (model_note, parallel_note) if n)
    return Cluster(manager, plan, cfg.model, notes)


def job_manager() -> JobManager:
    """The shared JobManager (submit / status / jobs / cancel / workers)."""
    return cluster().manager


def worker_plan() -> WorkerPlan:
    """Which workers run where, and why (``lines``)."""
    return cluster().plan


@st.cache_resource(show_spinner=False)
def gpu_sampler() -> GpuSampler:
    """One background sampler (NVML, psutil) for the whole server; 5 minutes of history."""
    from chord_core.gpus.sampler import shared_sampler

    return shared_sampler(interval_s=GPU_SAMPLE_INTERVAL_S, history_s=GPU_HISTORY_S)


@st.cache_resource(show_spinner=False)
def downloads() -> DownloadManager:
    """Model downloads shared by all sessions (a download outlives the tab that began it)."""
    from chord_ui.downloads import DownloadManager

    return DownloadManager()


@st.cache_resource(show_spinner=False)
def renders() -> RenderManager:
    """Annotated-MP4 renders running in background threads (one per output file)."""
    from chord_ui.renders import RenderManager

    return RenderManager()


@st.cache_resource(show_spinner=False)
def library_index() -> Any:
    """The library's search index (FTS5 tables in the job store's file), one per server."""
    from chord_core.library.index import LibraryIndex

    return LibraryIndex(store().path)


def _stop_watches(watches: Any) -> None:
    watches.stop()


@st.cache_resource(show_spinner=False, on_release=_stop_watches)
def watches() -> Any:
    """The folders ``CHORD_WATCH`` names, watched over the shared manager and store (started
    once per server; only when the variable is set, so the workers are not started early)."""
    from chord_core.library.background import BackgroundWatches, watches_from_env

    settings = watches_from_env(cluster().startup_model) if env_value("CHORD_WATCH") else []
    if not settings:
        return BackgroundWatches(None, store(), [])
    return BackgroundWatches(job_manager(), store(), settings).start()


@st.cache_resource(show_spinner=False, on_release=_stop_watches)
def app_watches() -> Any:
    """The watches saved in the app (library/watch_saved.py), over the shared manager and
    store; made the first time one is saved (the workers start then, not before)."""
    from chord_core.library.watch_saved import AppWatches

    taken = [w.settings.watch_id for w, _ in watches().pairs]
    return AppWatches(job_manager(), store(), cluster().startup_model, taken=taken)


def _stop_streams(hub: Any) -> None:
    hub.shutdown()


@st.cache_resource(show_spinner=False, on_release=_stop_streams)
def stream_hub() -> Any:
    """The live streams of this server (the Live page), over the shared manager and store."""
    from chord_core.config import default_data_dir
    from chord_core.streams.hub import StreamHub

    return StreamHub(job_manager(), store(), default_data_dir())


@st.cache_resource(show_spinner=False)
def env_streams() -> list[str]:
    """Start the live streams ``CHORD_WATCH`` names (once per server); their ids."""
    from chord_core.streams.background import streams_from_env

    return [stream_hub().start(url, settings)["id"]
            for url, settings in streams_from_env(cluster().startup_model)]


@st.cache_resource(show_spinner=False)
def long_runs() -> LongRunManager:
    """Long-video runs (chapters, long grounding, search) in background threads."""
    from chord_ui.long_runs import LongRunManager

    return LongRunManager(store())
