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
from pathlib import Path

import streamlit as st

from chord_core.analysis.request import AnalysisRequest
from chord_core.runtime.jobs import JobSpec, JobState
from chord_core.types import Result
from chord_ui import resources
from chord_ui.inputs import Settings
from chord_ui.uploads import ClipSource

log = logging.getLogger(__name__)

K_JOBS, K_OUTCOMES = "jobs_by_clip", "job_outcomes"


# Where a shown job stands: the runtime's own job states (one enum, not a copy of it)
OutcomeState = JobState


@dataclass(frozen=True)
class Outcome:
    """A job's state as the page needs it."""

    job_id: str
    state: OutcomeState
    result: Result | None = None
    error: dict[str, str] | None = None
    elapsed_s: float = 0.0
    settling: bool = False  # cancelled; the frames it finished are still on their way

    def __post_init__(self) -> None:  # a state given as its word is its OutcomeState
        object.__setattr__(self, "state", OutcomeState(self.state))

    @property
    def finished(self) -> bool:
        return self.state.is_finished and not self.settling


def _jobs() -> dict[str, str]:
    return st.session_state.setdefault(K_JOBS, {})


def _outcomes() -> dict[str, Outcome]:
    return st.session_state.setdefault(K_OUTCOMES, {})


def job_key(clip_key: str, task: str) -> str:
    return f"{clip_key}:{task}"


def _request(clip: ClipSource, task: str, query: str, settings: Settings) -> AnalysisRequest:
    return AnalysisRequest(video_path=clip.path, task=task, query=query.strip(),
                           sampling=settings.sampling(task),
                           max_new_tokens=settings.max_new_tokens,
                           score_boxes=task == "ground" and bool(
                               st.session_state.get("ground_scores", False)),
                           media_roots=_roots_of(clip))


def _roots_of(clip: ClipSource) -> tuple[str, ...] | None:
    """The media roots a typed path or an upload is read under by the worker (it opens the
    file under them again: a link swapped in after the check is refused); None for the
    example clip, which Chord made itself outside the roots."""
    from chord_core.media.roots import is_under, job_roots

    roots = job_roots()
    return roots if is_under(Path(clip.path), [Path(r) for r in roots]) else None


def request_key(clip: ClipSource, task: str, query: str, settings: Settings,
                model: str) -> str:
    """The content key of this analysis (file bytes, task, query, model, every setting):
    the job manager and the store know a job by it, so the same clip with the same
    settings is one job, whoever submits it."""
    from dataclasses import asdict

    from chord_core.runtime.batch import request_key as core_key

    req = _request(clip, task, query, settings)
    sampling = asdict(req.sampling) | ({"score_boxes": True} if req.score_boxes else {})
    return core_key(clip.path, task, req.query, model, sampling, req.max_new_tokens)


def submit(clip: ClipSource, task: str, query: str, settings: Settings, model: str) -> str:
    """Queue an analysis on the shared job manager and file it under (clip, task). The same
    clip and settings already running or done is that job (nothing is queued twice).
    Raises ChordError (e.g. ConfigError for an empty target) before anything is queued."""
    request = _request(clip, task, query, settings)
    key = request_key(clip, task, query, settings, model)
    job_id = resources.job_manager().submit(JobSpec(request, model=model, label=clip.name,
                                                    key=key))
    _jobs()[job_key(clip.key, task)] = job_id
    log.info("submitted %s: %s %r on %s with %s", job_id, task, query, clip.name, model)
    return job_id


def same_job(key: str) -> tuple[str, str] | None:
    """(job id, state) of a job with this content key that is queued, running or done —
    in this server's manager, else done in the store — or None."""
    for status in resources.job_manager().jobs():
        if status.spec.key == key and status.state.value in ("queued", "running", "done"):
            return status.job_id, status.state.value
    done = resources.store().find_done(key)
    return (done, "done") if done else None


def follow(clip: ClipSource, task: str, job_id: str) -> None:
    """Show ``job_id`` as this clip's current job (live, or its stored result)."""
    _jobs()[job_key(clip.key, task)] = job_id
    _outcomes().pop(job_id, None)


def current_outcome(clip_key: str, task: str) -> Outcome | None:
    """The latest job for this clip and task (running or finished), or None."""
    job_id = _jobs().get(job_key(clip_key, task))
    if job_id is None:
        return None
    kept = _outcomes().get(job_id)
    if kept is not None:
        return kept
    outcome = job_outcome(job_id)
    if outcome is None:
        log.info("job %s is no longer known to the job manager or the store", job_id)
        _jobs().pop(job_key(clip_key, task), None)
        return None
    if outcome.finished:
        _outcomes()[job_id] = outcome
    return outcome


def job_outcome(job_id: str) -> Outcome | None:
    """A job's outcome from the manager (live), else from the store (finished before this
    server started), else None."""
    try:
        status = resources.job_manager().status(job_id)
    except KeyError:
        return _stored_outcome(job_id)
    return Outcome(job_id, OutcomeState(status.state.value), status.result, status.error,
                   status.elapsed_s, status.settling)


def _stored_outcome(job_id: str) -> Outcome | None:
    store = resources.store()
    row = store.get_job(job_id)
    if row is None:
        return None
    result = None
    if row["state"] in ("done", "cancelled"):  # cancelled: a partial result, if any
        doc = store.get_result(job_id)
        try:
            result = Result.from_dict(doc) if doc is not None else None
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("stored result of %s is unreadable: %s", job_id, exc)
            return None
    start, end = row.get("started_at"), row.get("finished_at")
    elapsed = (end - start) if start and end else (result.timing.total_s if result else 0.0)
    return Outcome(job_id, OutcomeState(row["state"]), result, row.get("error"), elapsed)


def show_stored(clip: ClipSource, task: str, outcome: Outcome) -> None:
    """File a finished outcome (e.g. a stored result from History) under (clip, task), so
    the Analyze page shows it as the current result for that clip and task."""
    _jobs()[job_key(clip.key, task)] = outcome.job_id
    _outcomes()[outcome.job_id] = outcome
