"""How groups start (``groups.py`` says what a group is and how it ends): a group of new
children (``submit_group``: ``JobManager.submit_group``), a stage of a parent its driver
holds (``run_stage``: a long run's chunks), and a group over children already submitted
(``follow_group``: a parent a crash left open). Groups in flight are kept by parent id on
the manager's parent rows (``manager.parents.live``), until they end: ``live_group``."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from chord_core.runtime.groups import (EndPolicy, GroupChild, GroupHandle, GroupSpec,
                                       Summarise)
from chord_core.runtime.jobs import JobSpec, JobStatus

if TYPE_CHECKING:
    from chord_core.runtime.protocols import JobRunner


def live_group(manager: JobRunner, parent_id: str) -> GroupHandle | None:
    """The group of ``parent_id`` this manager drives now, or None."""
    return manager.parents.live.get(parent_id)


def submit_group(manager: JobRunner, group: GroupSpec, children: Sequence[JobSpec], *,
                 policy: EndPolicy = EndPolicy.BEST_EFFORT, reuse_done: bool = True,
                 summarise: Summarise | None = None) -> GroupHandle:
    """The runtime's side of ``JobManager.submit_group``. Raises ``AlreadyRunning`` when
    another live process drives the parent."""
    live, store = manager.parents.live, manager.parents.store
    same = live.get(group.parent_id)
    handle = GroupHandle(manager, group, policy, summarise)
    manager.parents.open(group.parent_id, kind=group.kind, video_path=group.video_path,
                         model=group.model, label=group.label, query=group.query,
                         spec={**group.spec, "group_policy": policy.value})
    if same is not None and not same.done():  # opened again (a request sent twice): shared
        return same
    with manager.holding():  # the dispatcher sees the children together (one burst)
        for i, spec in enumerate(children):
            done = store.find_done(spec.key) if reuse_done and store is not None \
                and spec.key else None
            job_id = done or str(manager.submit(
                replace(spec, parent=group.children_parent or group.parent_id)))
            handle.children.append(GroupChild(i, job_id, spec.label, reused=done is not None))
    _register(live, handle)
    return handle


def run_stage(manager: JobRunner, parent_id: str,
              children: Sequence[tuple[str, JobSpec]], *, in_flight: int,
              policy: EndPolicy = EndPolicy.FIRST_FAILURE, label: str = "",
              children_parent: str = "",
              on_child: Callable[[GroupChild, JobStatus | None], None] | None = None
              ) -> GroupHandle:
    """A stage of a parent its driver holds (a long run's chunks, then its summary): the
    children, each under its fixed id, at most ``in_flight`` at a time (a three-hour clip
    never queues hundreds of jobs whose frames would be read at once); one done before is
    reused, one the manager runs already is attached to. The runtime follows them and ends
    the stage by ``policy``; the parent's row stays its driver's (no summary or end is
    written here). ``on_child`` hears of each child that finished (on the dispatcher
    thread: keep it quick). ``children_parent``: the row the children belong to, when
    ``parent_id`` names the stage alone (a live stream's chunk: ``GroupSpec``)."""
    handle = GroupHandle(manager, GroupSpec(parent_id, kind="stage", label=label,
                                            noun="chunk", children_parent=children_parent),
                         policy, None)
    handle.owns_row, handle.on_child, handle._window = False, on_child, max(1, in_flight)
    handle.children = [GroupChild(i, job_id, spec.label) for i, (job_id, spec)
                       in enumerate(children)]
    handle._pending = [(i, spec) for i, (_, spec) in enumerate(children)]
    _register(manager.parents.live, handle)
    return handle


def _register(live: dict[str, GroupHandle], handle: GroupHandle) -> None:
    """Keep ``handle`` in ``live`` until it ended, and start following its children."""
    live[handle.parent_id] = handle

    def forget(h: GroupHandle) -> None:
        if live.get(h.parent_id) is h:  # not a later stage of the same parent
            live.pop(h.parent_id, None)

    handle._on_end = forget
    handle._follow()


def follow_group(manager: JobRunner, group: GroupSpec,
                 child_ids: Sequence[str], *, policy: EndPolicy) -> GroupHandle:
    """A group over children already submitted (a parent a crash left open, whose children
    the manager resumed under their ids): its row ends once they have."""
    handle = GroupHandle(manager, group, policy, None)
    handle.children = [GroupChild(i, job_id, "") for i, job_id in enumerate(child_ids)]
    _register(manager.parents.live, handle)
    return handle
