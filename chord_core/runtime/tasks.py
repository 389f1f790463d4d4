"""What the runtime knows about each task, in one table: a new task is one row here (and
its analysis in ``analysis/``), not names spread over the scheduler, the cancel path and
the worker loop.

``batch_call``: the engine method that runs several queued jobs of the task in one model
call (``describe_many``, ``entail_many``), or None (one job per call). ``splits``: a per-frame
job of the task may be split over the workers (``ground_chunk`` tasks). ``keeps_partial``:
a cancelled per-frame job hands back the frames it finished (half a description or verdict
means nothing alone, so those keep nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from chord_core.errors import ConfigError


@dataclass(frozen=True)
class TaskTraits:
    name: str
    batch_call: str | None = None
    splits: bool = False
    keeps_partial: bool = False


TASK_TRAITS: dict[str, TaskTraits] = {t.name: t for t in (
    TaskTraits("describe", batch_call="describe_many"),
    TaskTraits("ground", splits=True, keeps_partial=True),
    TaskTraits("entail", batch_call="entail_many"),
)}
BATCHED_TASKS = tuple(name for name, t in TASK_TRAITS.items() if t.batch_call)


def traits(task: str) -> TaskTraits:
    """The row of ``task``; ConfigError naming the known tasks for any other."""
    try:
        return TASK_TRAITS[task]
    except KeyError:
        raise ConfigError(f"the runtime does not know the task {task!r}",
                          hint=f"use one of: {', '.join(TASK_TRAITS)}") from None
