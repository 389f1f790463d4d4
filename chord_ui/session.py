"""Per-session bookkeeping: which job belongs to which clip and task, and finished outcomes.

Jobs are filed in ``st.session_state`` under (clip key, task) → job id, where the clip key is
the upload's content hash (or the local file's path/size/mtime hash). Finished outcomes are
copied into the session too, so results stay on screen across reruns and page switches
even if the shared job manager forgets old jobs. The History page files stored results the
same way (``show_stored``), so the Analyze views render them like fresh ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import streamlit as st

from chord_core.analysis.request import AnalysisRequest
from chord_core.runtime.jobs import JobSpec
from chord_core.types import Result
from chord_ui import resources
from chord_ui.inputs import Settings
from chord_ui.uploads import ClipSource

log = logging.getLogger(__name__)

K_JOBS, K_OUTCOMES = "jobs_by_clip", "job_outcomes"


@dataclass(frozen=True)
class Outcome:
    """A job's state as the page needs it."""

    job_id: str
    state: str
    result: Result | None = None
    error: dict[str, str] | None = None
    elapsed_s: float = 0.0

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")


def _jobs() -> dict[str, str]:
    return st.session_state.setdefault(K_JOBS, {})


def _outcomes() -> dict[str, Outcome]:
    return st.session_state.setdefault(K_OUTCOMES, {})


def job_key(clip_key: str, task: str) -> str:
    return f"{clip_key}:{task}"


def submit(clip: ClipSource, task: str, query: str, settings: Settings, model: str) -> str:
    """Queue an analysis on the shared job manager and file it under (clip, task).
    Raises ChordError (e.g. ConfigError for an empty target) before anything is queued."""
    request = AnalysisRequest(video_path=clip.path, task=task, query=query.strip(),
                              sampling=settings.sampling(task),
                              max_new_tokens=settings.max_new_tokens,
                              score_boxes=task == "ground" and bool(
                                  st.session_state.get("ground_scores", False)))
    job_id = resources.job_manager().submit(JobSpec(request, model=model, label=clip.name))
    _jobs()[job_key(clip.key, task)] = job_id
    log.info("submitted %s: %s %r on %s with %s", job_id, task, query, clip.name, model)
    return job_id


def current_outcome(clip_key: str, task: str) -> Outcome | None:
    """The latest job for this clip and task (running or finished), or None."""
    job_id = _jobs().get(job_key(clip_key, task))
    if job_id is None:
        return None
    kept = _outcomes().get(job_id)
    if kept is not None:
        return kept
    try:
        status = resources.job_manager().status(job_id)
    except KeyError:
        log.info("job %s is no longer known to the job manager", job_id)
        _jobs().pop(job_key(clip_key, task), None)
        return None
    outcome = Outcome(job_id, status.state.value, status.result, status.error, status.elapsed_s)
    if outcome.finished:
        _outcomes()[job_id] = outcome
    return outcome


def show_stored(clip: ClipSource, task: str, outcome: Outcome) -> None:
    """File a finished outcome (e.g. a stored result from History) under (clip, task), so
    the Analyze page shows it as the current result for that clip and task."""
    _jobs()[job_key(clip.key, task)] = outcome.job_id
    _outcomes()[outcome.job_id] = outcome
