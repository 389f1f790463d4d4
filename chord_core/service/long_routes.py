"""The jobs API's long-video tasks: ``POST /v1/jobs`` with ``task`` chapters, ground-long or
search-long (``jobs_routes`` hands them here), and their status, document, events and cancel.

    {"task": "chapters", "video_path": "/data/media/talk.mp4", "chunk_s": 60}
    {"task": "ground-long", "video_path": "…", "target": "the red car", "fps": 1}
    {"task": "search-long", "video_path": "…", "query": "a person opens the car door"}

Every field is bounded (``LongBody``; frames, pixels and tokens also by the server's caps,
``CHORD_API_MAX_*``), the clip lies under the media roots (or is uploaded), and the answer is
a 202 with the run's parent id at once: the run goes on in the service (``long_jobs``).
GET gives its state, ``progress`` (stage, chunks done of total) and, once done, ``document``:
what the CLI's ``--json`` writes (chord.chapters/v1, chord.result/v1, a search's hits).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chord_core.service.http_errors import ApiError, invalid_body, job_error_view
from chord_core.service.long_jobs import FINISHED, LongJob, LongRuns, Watched

LONG_TASKS = ("chapters", "ground-long", "search-long")
API_TASK = {"chapters": "chapters", "ground": "ground-long", "search": "search",
            "search-long": "search-long"}  # a parent row's kind → its task in the API
EVENTS_MAX_S = 6 * 3600.0  # a long run's stream is followed at most this long
FIELDS_HINT = ("fields: task (chapters|ground-long|search-long), video_path or a 'file' "
               "upload, target (ground-long), query (search-long), chunk_s, cuts, chapter_s, "
               "frames_per_chunk, max_new_tokens, fps, long_after; search-long: method, "
               "max_chapters, max_frames; ground-long: ground_max_pixels, ground_tokens")


class LongBody(BaseModel):
    """A long-video job request; every number bounded."""

    model_config = ConfigDict(extra="forbid")

    task: Literal["chapters", "ground-long", "search-long"]
    video_path: str | None = Field(None, max_length=4096)
    target: str = Field("", max_length=2000)
    query: str = Field("", max_length=2000)
    label: str = Field("", max_length=200)
    long_after: float | None = Field(None, ge=0, le=1e7)
    chunk_s: float | None = Field(None, ge=1, le=3600)
    cuts: Literal["auto", "scene", "keyframes", "fixed"] | None = None
    chapter_s: float | None = Field(None, ge=1, le=86400)
    frames_per_chunk: int | None = Field(None, ge=4, le=256)
    max_new_tokens: int | None = Field(None, ge=128, le=2048)
    fps: float | None = Field(None, gt=0, le=10)
    method: Literal["entail", "ground"] = "entail"
    max_chapters: int = Field(3, ge=1, le=24)
    max_frames: int = Field(32, ge=4, le=256)
    ground_max_pixels: int | None = Field(None, ge=784, le=16_777_216)
    ground_tokens: int | None = Field(None, ge=1, le=2048)


def parse_long(fields: dict[str, Any], settings: Any) -> LongBody:
    """The request checked: its fields (422), the server's caps (400) and its text (400)."""
    try:
        body = LongBody.model_validate(fields)
    except ValidationError as exc:
        raise invalid_body(exc, FIELDS_HINT) from None
    over = [f"{name} {value:,} is over this server's cap of {cap:,} ({var})"
            for name, value, cap, var in (
                ("frames_per_chunk", body.frames_per_chunk, settings.max_frames,
                 "CHORD_API_MAX_FRAMES"),
                ("max_frames", body.max_frames, settings.max_frames, "CHORD_API_MAX_FRAMES"),
                ("max_new_tokens", body.max_new_tokens, settings.max_new_tokens,
                 "CHORD_API_MAX_NEW_TOKENS"),
                ("ground_tokens", body.ground_tokens, settings.max_new_tokens,
                 "CHORD_API_MAX_NEW_TOKENS"),
                ("ground_max_pixels", body.ground_max_pixels, settings.max_pixels,
                 "CHORD_API_MAX_PIXELS"))
            if value is not None and value > cap]
    if over:
        raise ApiError(400, "; ".join(over), "ask for less, or leave the field out for the "
                                             "server's default")
    _text(body)
    return body


def _text(body: LongBody) -> str:
    """The run's text: ground-long's target, search-long's query ("" for chapters)."""
    from chord_core.service.inputs import text_field

    if body.task == "chapters":
        return ""
    name = "target" if body.task == "ground-long" else "query"
    text = text_field(getattr(body, name) or body.target or body.query, name).strip()
    if not text:
        raise ApiError(400, f"{body.task} needs a {name}",
                       f'e.g. {{"task": "{body.task}", "video_path": "…", "{name}": '
                       '"a person opens the car door"}')
    return text


def start_long(runs: LongRuns, body: LongBody, path: str, label: str = "") -> LongJob:
    """Probe and hash the clip, open the run's parent row and drive it (``LongRuns``):
    the run's ``LongJob`` (the one already going when the same run is asked again).
    Blocking (the clip is read whole for its key): call it off the event loop."""
    from chord_core.analysis.request import AnalysisRequest, probe_input
    from chord_core.errors import InputError
    from chord_core.longvideo.runs import run_id
    from chord_core.longvideo.settings import settings_from_env
    from chord_core.media.content_keys import file_hash

    info = probe_input(path)
    if info.container == "image":
        raise InputError(f"{Path(path).name} is an image; {body.task} needs a video",
                         hint="use task describe, ground or entail for an image")
    key, text, model = file_hash(path), _text(body), runs.model
    settings = settings_from_env(
        threshold_s=body.long_after, chunk_s=body.chunk_s, cuts=body.cuts,
        chapter_s=body.chapter_s, describe_max_frames=body.frames_per_chunk,
        max_new_tokens=body.max_new_tokens,
        ground_fps=body.fps if body.task == "ground-long" else None)
    if body.task != "chapters":
        AnalysisRequest(path, "ground" if body.task == "ground-long" else body.method, text)
    origin = {"service": {**body.model_dump(exclude_none=True), "video_path": path,
                          "label": label}}
    label = label or info.path.rsplit("/", 1)[-1]
    n = runs.in_flight()
    if body.task == "chapters":
        from chord_core.longvideo.chapters import chapters_run_id

        job = LongJob(chapters_run_id(key, settings, model), body.task, "", label)
    elif body.task == "ground-long":
        from chord_core.longvideo.ground import ground_run_id
        from chord_core.longvideo.settings import GROUND_LONG_TOKENS, ground_long_sampling

        sampling = ground_long_sampling(body.ground_max_pixels)
        tokens = body.ground_tokens or GROUND_LONG_TOKENS
        job = LongJob(ground_run_id(key, text, settings, model, sampling, tokens),
                      body.task, text, label)
    else:
        from dataclasses import asdict

        job = LongJob(run_id("search-long", key, model, {
            "chapters": {k: v for k, v in asdict(settings).items() if k != "in_flight"},
            "query": text, "method": body.method, "max_chapters": body.max_chapters,
            "fps": body.fps or 1.0, "max_frames": body.max_frames}), body.task, text, label)
    job, new = runs.claim(job)
    if not new:
        return job
    watched = Watched(runs.manager, job)
    try:
        if body.task == "chapters":
            from chord_core.longvideo.chapters import ChaptersRun

            chapters = ChaptersRun(watched, info, key, settings, model, in_flight=n,
                                   on_progress=job.on_progress, cancel=job.cancel,
                                   origin=origin)
            runs.drive(job, lambda j: chapters().to_dict())
        elif body.task == "ground-long":
            runs.drive(job, lambda j: _ground(watched, j, info, key, settings, model, n,
                                              sampling, tokens, origin))
        else:
            runs.drive(job, _searcher(watched, job, info, key, settings, model, n, body,
                                      origin))
    except BaseException:
        runs.drop(job)  # AlreadyRunning: another process drives it; nothing was started
        raise
    return job


def _ground(manager: Any, job: LongJob, info: Any, key: str, settings: Any, model: str,
            n: int, sampling: Any, tokens: int, origin: dict[str, Any]) -> dict[str, Any]:
    from chord_core.longvideo.ground import ground_long
    from chord_core.longvideo.settings import GROUND_LONG_BATCH

    return ground_long(manager, info, key, job.query, settings, model, sampling=sampling,
                       in_flight=n, on_progress=job.on_progress, cancel=job.cancel,
                       batch_size=GROUND_LONG_BATCH, max_new_tokens=tokens,
                       origin=origin).to_dict()


def _searcher(manager: Any, job: LongJob, info: Any, key: str, settings: Any, model: str,
              n: int, body: LongBody, origin: dict[str, Any]) -> Any:
    """search-long: a parent of its own (opened now) over the chapters run it needs (made
    or resumed, under it) and the search (under the chapters run)."""
    from chord_core.longvideo.chapters import ChaptersRun
    from chord_core.longvideo.runs import ParentRun
    from chord_core.longvideo.search import search

    runs = ParentRun(manager, job.job_id, kind="search-long", video_path=info.path,
                     label=job.label, model=model, query=job.query,
                     spec={"task": "search", "origin": origin})

    def progress(event: Any) -> None:
        job.on_progress(event)
        runs.progress({"progress": event.to_dict()})

    def work(_job: LongJob) -> dict[str, Any]:
        done = runs.final()
        if done is not None:
            return done
        with runs.running():
            doc = ChaptersRun(manager, info, key, settings, model, in_flight=n,
                              on_progress=progress, cancel=job.cancel, parent=job.job_id)()
            found = search(manager, info, key, doc, job.query, model, method=body.method,
                           max_chapters=body.max_chapters, fps=body.fps or 1.0,
                           max_frames=body.max_frames, in_flight=n, on_progress=progress,
                           cancel=job.cancel, snap_keyframes=settings.snap_keyframes)
        runs.finish(found.to_dict())
        return found.to_dict()
    return work


def restart(runs: LongRuns, fields: dict[str, Any]) -> LongJob:
    """A run a stop left open, driven again from the request it was started with (its
    clip was checked then; it must still be a file)."""
    body = LongBody.model_validate({k: v for k, v in fields.items() if k != "label"})
    return start_long(runs, body, str(body.video_path), str(fields.get("label") or ""))


def resume_long_runs(runtime: Any) -> Any:
    """Drive again the long-video runs of this service a stop left open (``long_jobs``),
    on a thread (returned): each clip is probed and hashed again before its run goes on,
    and the service answers meanwhile (GET reads such a run's row until then)."""
    import threading

    runs = long_runs_of(runtime)
    thread = threading.Thread(target=runs.resume, args=(lambda body: restart(runs, body),),
                              name="chord-resume-long", daemon=True)
    thread.start()
    return thread


def long_runs_of(runtime: Any) -> LongRuns:
    """The runtime's long runs (made at first use when ``start_runtime`` did not)."""
    if getattr(runtime, "long_runs", None) is None:
        runtime.long_runs = LongRuns(runtime.manager, runtime.store, runtime.model,
                                     getattr(runtime, "batch_width", 0))
    runs: LongRuns = runtime.long_runs
    return runs


def links(job_id: str) -> dict[str, Any]:
    """A job's links in the jobs API (every job and long run: ``jobs_routes`` uses it too)."""
    base = f"/v1/jobs/{job_id}"
    return {"links": {"self": base, "result": base + "/result", "events": base + "/events"}}


def job_view(job: LongJob) -> dict[str, Any]:
    view = job.view()
    if view["error"]:
        view["error"] = job_error_view(view["error"])
    return {**view, **links(job.job_id)}


def row_view(row: dict[str, Any]) -> dict[str, Any] | None:
    """A long run's view from its parent row (a run this process does not drive: finished
    before it started, or another process's); None for any other row."""
    spec = row.get("spec") or {}
    kind = spec.get("long_run") if isinstance(spec, dict) else None
    if kind not in API_TASK:
        return None
    summary = row.get("summary") or {}
    return {"job_id": row["job_id"], "state": row["state"], "task": API_TASK[kind],
            "query": row["query"], "label": row.get("video_name") or "",
            "submitted_at": row["submitted_at"], "started_at": row["started_at"],
            "finished_at": row["finished_at"], "worker": None,
            "progress": summary.get("progress"),
            "error": job_error_view(row["error"]) if row["error"] else None,
            "document": summary.get("document") if row["state"] == "done" else None,
            **links(row["job_id"])}


def sse(data: Any, event: str | None = None) -> str:
    """One server-sent event (``data`` as JSON on one line), for every job stream."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def change_stream(watch: Callable[[Callable[[], None]], Callable[[], None]] | None,
                        read: Callable[[], tuple[dict[str, Any], list[tuple[str, Any]]]],
                        finished: Callable[[str], bool], max_s: float
                        ) -> AsyncIterator[str]:
    """A job's event stream (a short job's or a long run's): ``read()`` gives its view and
    the events since the last read; a ``state`` event on each change of the view's state,
    those events, then ``end`` with the final view once ``finished(state)``, when nothing
    can change it (``watch`` None: a job only the store knows) or after ``max_s``. Woken by
    ``watch`` (called on any thread); nothing polls."""
    woken, loop = asyncio.Event(), asyncio.get_running_loop()

    def wake() -> None:  # on the job's (the dispatcher's, the run's) thread
        loop.call_soon_threadsafe(woken.set)
    unwatch = watch(wake) if watch else None
    last_state, deadline = None, time.monotonic() + max_s
    try:
        while True:
            woken.clear()
            view, events = read()  # after watching: no change is missed
            if view["state"] != last_state:
                last_state = view["state"]
                yield sse(view, "state")
            for name, data in events:
                yield sse(data, name)
            left = deadline - time.monotonic()
            if finished(view["state"]) or unwatch is None or left <= 0:
                yield sse(view, "end")
                return
            try:
                await asyncio.wait_for(woken.wait(), timeout=left)
            except asyncio.TimeoutError:
                pass
    finally:
        if unwatch is not None:
            unwatch()


def long_events(job: LongJob) -> AsyncIterator[str]:
    """The run's stream: ``state`` on each change, a ``child`` event as each chunk job
    starts and ends, ``progress`` after each, then ``end`` (the final view, without the
    document: GET /result has it)."""
    cursor = 0

    def read() -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        nonlocal cursor
        view = {k: v for k, v in job_view(job).items() if k != "document"}
        events, cursor = job.since(cursor)  # after the view: none is missed at the end
        return view, events
    return change_stream(job.watch, read, lambda state: state in FINISHED, EVENTS_MAX_S)
