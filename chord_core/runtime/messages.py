"""What crosses between the job manager and a worker, as typed records.

Every executor (threads, local processes, Ray actors) carries the same records; only plain
data crosses (dataclasses, dicts, strings — never a tensor or a model)::

    manager ──RunTasks──▶ worker            (its inbox; StopWorker() ends it)
    manager ──CancelTask─▶ worker           (its control line, read while a task runs)
    manager ◀── Ready | Started | Progress | Done | Failed | Stopped ── worker
    manager ◀── WorkerDied                  (from the executor, never from the worker)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chord_core.types import ProgressEvent


@dataclass(frozen=True)
class RunTasks:
    """Run these tasks: one task, or several describe/entail tasks sharing one model call.
    ``ahead``: the tasks queued behind them for this worker, whose frames it reads while the
    model runs these (a hint: they may still go to another worker)."""

    tasks: tuple[Any, ...]  # runtime.workers.Task
    ahead: tuple[Any, ...] = ()


@dataclass(frozen=True)
class CancelTask:
    task_id: str


@dataclass(frozen=True)
class Expect:
    """Sent on the control channel while a call runs: the tasks now queued behind it (jobs
    queued since the call was handed out), whose frames to read meanwhile. ``call`` is the
    first task id of the call it was worked out for; a worker on another call ignores it."""

    call: str
    tasks: tuple[Any, ...]


@dataclass(frozen=True)
class StopWorker:
    """Finish the task in hand, then exit."""


@dataclass(frozen=True)
class Ready:
    """The worker loaded its start-up model (``model_info``) or could not (``error``; it
    still serves jobs naming another model). ``startup``: where the start-up time went."""

    worker_id: str
    model_info: dict[str, Any] | None
    error: dict[str, str] | None = None
    startup: dict[str, float] | None = None


@dataclass(frozen=True)
class Warming:
    """A starting (or, with a background warm-up, a ready) worker's start-up step in hand:
    ``step`` = {"step", "detail", "elapsed_s", "left_s" (None: no estimate yet), "done",
    "total", "background"}; ``{}`` once the warm-up ended."""

    worker_id: str
    step: dict[str, Any]


@dataclass(frozen=True)
class Started:
    worker_id: str
    task_id: str


@dataclass(frozen=True)
class Progress:
    worker_id: str
    task_id: str
    event: ProgressEvent


@dataclass(frozen=True)
class Done:
    """``payload`` is a Result ("analyze" tasks) or a GroundChunk ("ground_chunk")."""

    worker_id: str
    task_id: str
    payload: Any
    busy_s: float


@dataclass(frozen=True)
class Failed:
    """``partial``: a cancelled grounding task's frames finished by then, as ``Done``'s
    payload would be (a partial Result, or a GroundChunk); None for anything else."""

    worker_id: str
    task_id: str
    error: dict[str, str]
    partial: Any = None


@dataclass(frozen=True)
class Stopped:
    worker_id: str


@dataclass(frozen=True)
class WorkerDied:
    """The executor saw the worker end without a ``Stopped`` (crash, kill, lost node)."""

    worker_id: str
    exitcode: int | None


ToWorker = RunTasks | CancelTask | StopWorker
FromWorker = Ready | Warming | Started | Progress | Done | Failed | Stopped
Event = Ready | Warming | Started | Progress | Done | Failed | Stopped | WorkerDied
