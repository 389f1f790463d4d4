"""A Batch-page run as one parent job, like the CLI's ``chord batch`` (``runtime/batch.py``).

The run is one job row (``batch-<key>``) written only through the manager
(``manager.parents``), under the manager's lease as its owner, so no other process (``serve``
on the same store) claims it while the app lives. Its id is a content key of the clips' keys
(each already holds the file's bytes, task, query, model and sampling): the same clips with
the same settings queued again are the same parent, and their finished clips are skipped
(``store.find_done``). The clips' jobs are its children (``JobSpec.parent``), so History
shows one row per run with its clips inside.

The parent ends on the children's handles (a done callback each), not on the page: a tab
closed mid-run still ends it done (every clip done or skipped), failed (how many, the
first error) or cancelled (Cancel all) once its last clip finishes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.errors import GroupFailed
from chord_core.runtime.protocols import JobRunner

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


class PageBatchParent:
    """The parent row of one Batch-page run: opened ``running`` (again, on a re-run), its
    summary after every clip that finishes, ended when the last one has."""

    def __init__(self, manager: JobRunner, run: BatchRun) -> None:
        self.manager, self.run = manager, run
        self._lock = threading.Lock()
        self._left = 0
        manager.parents.open(run.batch_id, kind=KIND, video_path="", model=run.model,
                             label=f"batch of {len(run.clips)} clip(s)", query=run.query,
                             spec={"task": run.task, "clips": len(run.clips),
                                   "source": "app"})

    def follow(self) -> None:
        """Hear of every queued clip's end (a done callback on its handle); a run with
        nothing queued (all skipped or unreadable) ends now."""
        pending = [c for c in self.run.clips if c.job_id and not c.skipped]
        with self._lock:
            self._left = len(pending)
        if not pending:
            self._end()
            return
        for clip in pending:
            self.manager.handle(clip.job_id).add_done_callback(self._one_done)

    def _one_done(self, _handle: Any) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        try:
            if last:
                self._end()
            else:
                self.manager.parents.summarise(self.run.batch_id, self.doc())
        except Exception:  # noqa: BLE001 - a callback must never take the dispatcher down
            log.exception("batch %s: the parent row was not updated", self.run.batch_id)

    def states(self) -> list[tuple[BatchClip, str, dict | None]]:
        """(clip, state, error) of every clip now: skipped ones are done before."""
        out = []
        for c in self.run.clips:
            if c.error is not None:
                out.append((c, "failed", c.error))
            elif c.skipped:
                out.append((c, "done", None))
            else:
                try:
                    st = self.manager.status(c.job_id)
                    out.append((c, st.state.value, st.error))
                except KeyError:
                    out.append((c, "failed", {"message": "the job is gone"}))
        return out

    def doc(self) -> dict[str, Any]:
        """The parent's summary: the run, each clip's job and state, and its progress."""
        states = self.states()
        counts: dict[str, int] = {}
        for c, state, _ in states:
            key = "skipped" if c.skipped else state
            counts[key] = counts.get(key, 0) + 1
        done = sum(state in ("done", "failed", "cancelled") for _, state, _ in states)
        return {"batch_id": self.run.batch_id, "task": self.run.task, "query": self.run.query,
                "model": self.run.model, "counts": counts,
                "items": [{"clip": c.name, "job_id": c.job_id, "state": state,
                           "skipped": bool(c.skipped), "error": err}
                          for c, state, err in states],
                "progress": {"stage": "clips", "done": done, "total": len(states)}}

    def _end(self) -> None:
        """Cancelled (Cancel all stopped some clips), failed (how many, the first one's
        error), else done (every clip done or skipped)."""
        doc = self.doc()
        failed = [i for i in doc["items"] if i["state"] == "failed"]
        if any(i["state"] == "cancelled" for i in doc["items"]):
            state, error = "cancelled", None
        elif failed:
            first = failed[0]
            state, error = "failed", GroupFailed(
                f"{len(failed)} of {len(doc['items'])} clip(s) failed; the first, "
                f"{first['clip']}: {(first['error'] or {}).get('message')}",
                hint="each clip's error is on the Batch page and in History, under this "
                     "batch").to_dict()
        else:
            state, error = "done", None
        self.manager.parents.finish(self.run.batch_id, state, doc, error=error)
        log.info("batch %s ended %s", self.run.batch_id, state)
