"""A Batch-page run as one parent job, like the CLI's ``chord batch`` (``runtime/batch.py``).

The run is one job row (``batch-<key>``) written only through the manager
(``manager.parents``), under the manager's lease as its owner, so no other process (``serve``
on the same store) claims it while the app lives. Its id is a content key of the clips' keys
(each already holds the file's bytes, task, query, model and sampling): the same clips with
the same settings queued again are the same parent, and their finished clips are skipped
(``store.find_done``). The clips' jobs are its children (``JobSpec.parent``), so History
shows one row per run with its clips inside.

The run is a runtime group (``JobManager.submit_group``, policy best effort): the runtime
follows the children's handles and ends the parent, not the page: a tab closed mid-run
still ends it done (every clip done or skipped), failed (how many, the first error) or
cancelled (Cancel all) once its last clip finishes. This module only says what the run's
parent is (``group_spec``) and how its summary reads (``PageSummary``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.runtime.groups import GroupHandle, GroupSpec, tally

if TYPE_CHECKING:
    from chord_ui.batch_jobs import BatchClip, BatchRun

log = logging.getLogger(__name__)

KIND = "batch"  # the parent's ``long_run`` kind, the same as the CLI's batch


def parent_id(task: str, query: str, model: str, keys: Sequence[str],
              unkeyed: Sequence[str] = ()) -> str:
    """The run's id: the same for the same clips (their content keys; the paths of clips
    that could not be read) and settings, whatever order they were chosen in."""
    ident = json.dumps(["app", task, query, model, sorted(set(keys)), sorted(set(unkeyed))])
    return "batch-" + hashlib.sha256(ident.encode()).hexdigest()[:12]


def group_spec(run: BatchRun) -> GroupSpec:
    """The run's parent as a runtime group (``runtime/groups.py``); clips that could not
    even be queued count as failed when it ends."""
    return GroupSpec(run.batch_id, kind=KIND, label=f"batch of {len(run.clips)} clip(s)",
                     model=run.model, query=run.query,
                     spec={"task": run.task, "clips": len(run.clips), "source": "app"},
                     noun="clip", hint="each clip's error is on the Batch page and in "
                                       "History, under this batch",
                     failed_before=tuple((c.name, str((c.error or {}).get("message")))
                                         for c in run.clips if c.error is not None))


class PageSummary:
    """The parent's summary as the page and History read it: every clip of the run (the
    unreadable and the repeated ones too) with its job and state. The runtime's group
    writes it after every clip that finishes, and when the last has."""

    def __init__(self, run: BatchRun, queued: Sequence[BatchClip]) -> None:
        self.run, self.queued = run, list(queued)  # queued[i] is the group's child i

    def states(self, handle: GroupHandle) -> list[tuple[BatchClip, str, dict | None]]:
        """(clip, state, error) of every clip now: skipped ones are done before."""
        by_clip = {id(c): (child, st) for c, child, st in
                   zip(self.queued, handle.children, handle.statuses())}
        out = []
        for c in self.run.clips:
            child_st = by_clip.get(id(c))
            if c.error is not None:
                out.append((c, "failed", c.error))
            elif child_st is None or child_st[0].reused:  # repeated in the run, done before
                out.append((c, "done", None))
            elif child_st[1] is None:
                out.append((c, "failed", {"message": "the job is gone"}))
            else:
                out.append((c, child_st[1].state.value, child_st[1].error))
        return out

    def doc(self, handle: GroupHandle) -> dict[str, Any]:
        """The parent's summary: the run, each clip's job and state, and its progress."""
        states = self.states(handle)
        counts, done = tally((state, bool(c.skipped)) for c, state, _ in states)
        return {"batch_id": self.run.batch_id, "task": self.run.task, "query": self.run.query,
                "model": self.run.model, "counts": counts,
                "items": [{"clip": c.name, "job_id": c.job_id, "state": state,
                           "skipped": bool(c.skipped), "error": err}
                          for c, state, err in states],
                "progress": {"stage": "clips", "done": done, "total": len(states)}}
