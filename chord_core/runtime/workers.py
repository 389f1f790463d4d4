"""Worker processes: one per GPU group (or per CPU slot), each owning one loaded model.

A worker is started with the ``spawn`` method (``executors.ProcessExecutor``);
``CUDA_VISIBLE_DEVICES`` is set to its group before torch is imported — the parent's own
entries for those GPUs (see ``gpus/devices.py``), so ``CUDA_VISIBLE_DEVICES=1`` in the parent
lands the worker on physical GPU 1 — and inside the worker its GPUs are ``cuda:0..k-1``; a
group of several GPUs shards the model over exactly that group. The model is loaded once,
then tasks arrive on the worker's inbox and messages go back on its outbox (``messages.py``):

    manager ──RunTasks──▶ inbox ─▶ serve ─▶ Engine.analyze / ground_chunk / describe_many
    manager ◀── Warming | Ready | Started | Progress | Done | Failed | Stopped ── outbox

``worker_main`` is the process's entry point (process set-up, then ``serve``); ``serve`` is
the loop every executor runs, threads and Ray actors included. A failing task is reported as
``Failed`` and the worker carries on; a crash of the whole process is seen by the executor,
and the manager restarts the worker and re-queues the task it held.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, cast

from chord_core.analysis.request import AnalysisRequest
from chord_core.config import (
    ModelConfig,
    deterministic_mode,
    env_value,
    read_ahead_mode,
)
from chord_core.errors import ChordError, JobCancelled, internal_error
from chord_core.runtime import lifeline
from chord_core.runtime.messages import (
    CancelTask,
    Done,
    Expect,
    Failed,
    Progress,
    RunTasks,
    Started,
    Stopped,
)
from chord_core.runtime.protocols import EngineFactory, WorkerEngine
from chord_core.runtime.tasks import traits
from chord_core.types import SamplingPlan, VideoInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process runs on. ``devices`` are the parent's CUDA ordinals (empty =
    CPU); ``visible`` is the ``CUDA_VISIBLE_DEVICES`` value that names them in the worker;
    ``env``: settings the worker's process takes on before anything reads them (a one-shot
    CLI run's, say), leaving the caller's own environment as it is."""

    worker_id: str
    devices: tuple[int, ...]
    model_cfg: ModelConfig
    max_memory_fraction: float = 0.9
    cpu_threads: int = 0
    warmup: bool = True
    visible: str = ""
    in_process: bool = False  # a thread of the caller's process: ``model_cfg`` used as given
    env: tuple[tuple[str, str], ...] = ()

    @property
    def is_cpu(self) -> bool:
        return not self.devices


@dataclass(frozen=True)
class Task:
    """One unit of work. ``kind`` "analyze" is a whole job; "ground_chunk" is a slice of a
    grounding job's frames (``info`` and ``plan`` were decided by the manager)."""

    task_id: str
    job_id: str
    kind: str
    request: AnalysisRequest
    model: str | None = None
    info: VideoInfo | None = None
    plan: SamplingPlan | None = None
    cost: float = 1.0
    probe_s: float = 0.0


def cpu_specs(n: int, model_cfg: ModelConfig, *, threads: int = 0) -> list[WorkerSpec]:
    """``n`` CPU workers running the same code path as GPU workers (tests, GPU-less hosts)."""
    return [WorkerSpec(f"cpu{i}", (), model_cfg, cpu_threads=threads) for i in range(n)]


def gpu_specs(groups: tuple[tuple[int, ...], ...], model_cfg: ModelConfig,
              max_memory_fraction: float = 0.9, *, parent_visible: str | None | object = ...,
              uuids: dict[int, str] | None = None) -> list[WorkerSpec]:
    """One worker per planned GPU group (see ``planner.plan_gpus``). ``parent_visible`` is
    this process's ``CUDA_VISIBLE_DEVICES`` (read from the environment unless given) and
    ``uuids`` the GPUs' UUIDs by ordinal: together they name each group's physical GPUs."""
    from chord_core.gpus.devices import worker_visible

    if parent_visible is ...:
        parent_visible = env_value("CUDA_VISIBLE_DEVICES") or None
    threads = gpu_worker_threads(len(groups))
    return [WorkerSpec("gpu" + "-".join(str(d) for d in grp), tuple(grp), model_cfg,
                       max_memory_fraction, cpu_threads=threads,
                       visible=worker_visible(grp, parent_visible, uuids))  # type: ignore[arg-type]
            for grp in groups]


def gpu_worker_threads(n_workers: int) -> int:
    """CPU threads per GPU worker: a share of the cores, at most 8. Each worker's main thread
    launches GPU kernels; oversubscribed intra-op thread pools from several workers would
    steal its cycles and slow every GPU."""
    return max(1, min(8, (os.cpu_count() or 1) // max(1, n_workers)))


def _engine_config(spec: WorkerSpec, model: str | None) -> ModelConfig:
    cfg = spec.model_cfg if not model else replace(spec.model_cfg, model=model)
    if spec.in_process:
        return cfg
    if spec.is_cpu:
        return replace(cfg, device="cpu")
    mem = cfg.max_memory if cfg.max_memory is not None else spec.max_memory_fraction
    # the planner chose this group: a group of several GPUs shards over all of them
    strategy = "shard" if len(spec.devices) > 1 else "single"
    return replace(cfg, device="auto", max_memory=mem, strategy=strategy)


def worker_main(spec: WorkerSpec, inbox: Any, outbox: Any, control: Any) -> None:
    """Entry point of a worker process (spawned): set the process up for its GPUs, then
    ``serve`` until told to stop."""
    t0 = time.perf_counter()
    lifeline.bind_to_parent()  # dies with the manager's process, even on SIGKILL
    os.environ.update(dict(spec.env))  # before the warm-up mode below is read
    # The parent's own names for this group's GPUs, read in the parent's device order (the
    # worker inherits CUDA_DEVICE_ORDER); a CPU worker sees no GPU.
    os.environ["CUDA_VISIBLE_DEVICES"] = "" if spec.is_cpu else (
        spec.visible or ",".join(str(d) for d in spec.devices))
    from chord_core.runtime.startup import StartReport, prefetch_weights, resolve_mode

    prefetch_weights(spec.model_cfg.model)  # the disk reads while the imports run
    StartReport(spec, outbox, t0, resolve_mode(spec)).step(
        "importing: torch, transformers, the model and processor classes")
    prepare_process(spec)
    serve(spec, inbox, outbox, control, t0=t0)


def prepare_process(spec: WorkerSpec) -> None:
    """What a worker's process needs before torch starts: logging with the worker's name,
    deterministic kernels if asked, a bytecode cache, the model stack's imports begun on a
    thread (``model/preimport.py``: the load step joins them), and its share of CPU threads.
    The caller has already fixed which GPUs the process sees (CUDA_VISIBLE_DEVICES, or Ray)."""
    deterministic = deterministic_mode()
    if deterministic:  # cuBLAS needs this before CUDA starts
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s {spec.worker_id} "
                        "%(name)s: %(message)s")
    from chord_core.model import preimport
    from chord_core.model.decode_step import compile_cache_env
    from chord_core.runtime.startup import bytecode_cache

    bytecode_cache()  # before any of the imports below
    compile_cache_env()  # the compile cache under the Chord cache, before inductor picks one
    preimport.start(spec.model_cfg.model)  # torch first: the line below waits for it
    import torch  # noqa: F401 — only now, after the visible GPUs are fixed

    if spec.cpu_threads:
        torch.set_num_threads(spec.cpu_threads)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def serve(spec: WorkerSpec, inbox: Any, outbox: Any, control: Any, *,
          engine_factory: EngineFactory | None = None,
          t0: float | None = None) -> None:
    """The worker loop of every executor: load the start-up model, report ``Ready``, then
    run each ``RunTasks`` from ``inbox`` until a ``StopWorker``. Cancels arrive on
    ``control`` while a task runs. ``engine_factory`` builds an engine from a ModelConfig
    (default ``Engine``)."""
    if engine_factory is None:
        from chord_core.analysis.engine import Engine

        engine_factory = cast(EngineFactory, Engine)
    from chord_core.runtime.startup import background_step, idle, start_engine

    t0 = time.perf_counter() if t0 is None else t0
    engine, warm_left, report = start_engine(spec, outbox, t0, engine_factory,
                                             _engine_config(spec, None))
    read_ahead = read_ahead_mode()
    current: dict[str, Any] = {"task": None, "cancel": threading.Event(), "call": None,
                               "engine": None, "model": None, "now": [],
                               "read_ahead": read_ahead}
    threading.Thread(target=_control_loop, args=(control, current), daemon=True,
                     name=f"chord-{spec.worker_id}-control").start()
    while True:
        if warm_left and engine is not None and idle(inbox):  # CHORD_WARMUP=lazy
            warm_left = background_step(engine, warm_left, report)
            continue
        msg = inbox.get()
        if not isinstance(msg, RunTasks):  # StopWorker
            outbox.put(Stopped(spec.worker_id))
            return
        tasks = list(msg.tasks)
        fresh = _engine_for(engine, spec, tasks, outbox, engine_factory)
        if fresh is not engine:
            warm_left = []  # another model: its shapes are captured on its requests
        engine = fresh
        if engine is None:
            continue
        now = [(t.info, t.plan) for t in tasks]
        current.update(engine=engine, model=tasks[0].model, now=now, call=tasks[0].task_id)
        _expect(current, tasks[0].task_id, msg.ahead)
        current["cancel"] = threading.Event()
        if len(tasks) == 1:
            current["task"] = tasks[0].task_id
            _run_task(engine, tasks[0], spec.worker_id, outbox, current["cancel"])
        else:  # a describe batch: a cancelled job's answer is dropped by the manager
            _run_batch(engine, tasks, spec.worker_id, outbox)
        current["task"] = None


def _engine_for(engine: WorkerEngine | None, spec: WorkerSpec, tasks: list[Task],
                outbox: Any, factory: EngineFactory) -> WorkerEngine | None:
    """The engine for the tasks' model (they share one): the current engine, or a freshly
    loaded one. A model that cannot be loaded fails these tasks (with the loader's message)
    and nothing else."""
    model = tasks[0].model
    want = model or spec.model_cfg.model
    if engine is not None and engine.model_cfg.model == want:
        return engine
    if engine is not None:
        engine.unload()
    fresh = factory(_engine_config(spec, model))
    try:
        fresh.load()
    except ChordError as exc:
        for task in tasks:
            outbox.put(Started(spec.worker_id, task.task_id))
            outbox.put(Failed(spec.worker_id, task.task_id, exc.to_dict()))
        return None
    return fresh


def _run_batch(engine: WorkerEngine, tasks: list[Task], worker_id: str, outbox: Any
               ) -> None:
    """Several describe tasks through one batched generate (``Engine.describe_many``), or
    several entail tasks through one scoring pass (``Engine.entail_many``); each
    task still gets its own started/progress/done-or-failed messages. Busy time is shared."""
    for task in tasks:
        outbox.put(Started(worker_id, task.task_id))
    lifeline.crash_if_injected(t.request.video_path for t in tasks)
    t0 = time.perf_counter()
    try:
        if traits(tasks[0].request.task).batch_call == "entail_many":  # a batch holds one task
            results = engine.entail_many([t.request for t in tasks],
                                         infos=[t.info for t in tasks],
                                         plans=[t.plan for t in tasks])
        else:
            results = engine.describe_many(
                [t.request for t in tasks], infos=[t.info for t in tasks],
                plans=[t.plan for t in tasks], batch_size=len(tasks),
                on_progress=lambda i, ev: outbox.put(Progress(worker_id, tasks[i].task_id, ev)))
    except Exception as exc:  # noqa: BLE001 — a crash fails this batch, not the worker
        log.exception("describe batch of %d crashed", len(tasks))
        results = [internal_error(exc, "the worker log")] * len(tasks)
    share = (time.perf_counter() - t0) / len(tasks)
    for task, res in zip(tasks, results):
        if isinstance(res, dict):
            outbox.put(Failed(worker_id, task.task_id, res))
        elif isinstance(res, ChordError):
            outbox.put(Failed(worker_id, task.task_id, res.to_dict()))
        else:
            res = replace(res, timing=replace(res.timing, probe_s=task.probe_s))
            outbox.put(Done(worker_id, task.task_id, res, share))


def _expect(current: dict[str, Any], call: str, ahead: Any) -> None:
    """Read the frames of the tasks queued behind call ``call`` while it runs (if it is
    still the call in hand), those for the same model."""
    engine, model = current["engine"], current["model"]
    if current["read_ahead"] and current["call"] == call and hasattr(engine, "expect"):
        engine.expect([(t.info, t.plan) for t in ahead if t.model == model],
                      now=current["now"])


def _control_loop(control: Any, current: dict[str, Any]) -> None:
    """Cancel requests and read-ahead hints arrive here while the main thread is busy in
    the model."""
    while True:
        msg = control.get()
        if isinstance(msg, CancelTask):
            if msg.task_id == current["task"]:
                current["cancel"].set()
        elif isinstance(msg, Expect):
            try:
                _expect(current, msg.call, msg.tasks)
            except Exception:  # noqa: BLE001 — a hint must never cost the cancels
                log.exception("read-ahead hint failed")
        else:  # StopWorker
            return


def _run_task(engine: WorkerEngine, task: Task, worker_id: str, outbox: Any,
              cancel: threading.Event) -> None:
    outbox.put(Started(worker_id, task.task_id))
    lifeline.crash_if_injected([task.request.video_path])
    t0 = time.perf_counter()

    def progress(event: Any) -> None:
        outbox.put(Progress(worker_id, task.task_id, event))

    try:
        payload: Any
        if task.kind == "ground_chunk":
            assert task.info is not None and task.plan is not None  # a chunk is planned
            payload = engine.ground_chunk(task.info, task.plan, task.request,
                                          on_progress=progress, cancel=cancel)
        else:
            payload = engine.analyze(task.request, on_progress=progress, cancel=cancel,
                                     info=task.info, sampling_plan=task.plan,
                                     probe_s=task.probe_s)
        outbox.put(Done(worker_id, task.task_id, payload, time.perf_counter() - t0))
    except JobCancelled as exc:  # with what it had done, when that means something alone
        outbox.put(Failed(worker_id, task.task_id,
                          JobCancelled("cancelled").to_dict(),
                          partial=exc.partial))
    except ChordError as exc:
        outbox.put(Failed(worker_id, task.task_id, exc.to_dict()))
    except Exception as exc:  # noqa: BLE001 — one bad task must not take the worker down
        log.exception("task %s crashed", task.task_id)
        outbox.put(Failed(worker_id, task.task_id, internal_error(exc, "the worker log")))
