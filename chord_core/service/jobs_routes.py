"""``/health``, ``/v1/models`` and the jobs API (submit, status, result, cancel, events).

A job is the app's job: ``POST /v1/jobs`` builds an ``AnalysisRequest`` and submits it to the
manager; status and results come from the manager while this process knows the job, and from
the store otherwise (jobs of an earlier run, or the app's). The result is the
``chord.result/v1`` document, as the CLI prints it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from chord_core.runtime.jobs import FINISHED_STATES
from chord_core.service.http_errors import ApiError, invalid_body, job_error_view
from chord_core.service.long_routes import (LONG_TASKS, LongBody, change_stream, links,
                                            long_events, long_runs_of, parse_long)
from chord_core.service.long_routes import job_view as long_job_view
from chord_core.service.long_routes import row_view, start_long

router = APIRouter()
EVENTS_MAX_S = 3600.0
UPLOAD_FIELD = "file"


class JobBody(BaseModel):
    """A job request (JSON, or the fields of a multipart form beside ``file``)."""

    model_config = ConfigDict(extra="forbid")

    task: Literal["describe", "ground", "entail"]
    video_path: str | None = Field(None, description="a file under the media roots")
    query: str = ""
    target: str = ""
    statement: str = ""
    prompt: str = ""
    max_new_tokens: int | None = None
    fps: float | None = None
    max_frames: int | None = None
    max_pixels: int | None = None
    token_budget: int | None = None
    label: str = ""

    def text(self) -> str:
        own = {"describe": self.prompt, "ground": self.target, "entail": self.statement}
        return own[self.task] or self.query


def _runtime(request: Request) -> Any:
    return request.app.state.runtime


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    """The served model, as OpenAI's ``/v1/models`` lists models."""
    rt = _runtime(request)
    return {"object": "list", "data": [{"id": rt.model, "object": "model",
                                        "created": int(rt.started_at), "owned_by": "chord"}]}


async def _body_and_upload(request: Request) -> tuple[dict[str, Any], Any]:
    """The job fields and the uploaded file (None for JSON bodies)."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype and ctype != "multipart/form-data" and ctype != "application/json" and \
            not ctype.endswith("+json"):  # issue 40: a urlencoded form was taken (202)
        raise ApiError(415, f"a job is JSON or a multipart upload, not {ctype[:80]}",
                       "send 'Content-Type: application/json' with a JSON object (curl: -H "
                       "'content-type: application/json' -d '{...}'), or upload the clip "
                       "as multipart/form-data (curl -F task=describe -F file=@clip.mp4)")
    if ctype == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=32)
        upload = form.get(UPLOAD_FIELD)
        fields = {k: v for k, v in form.items() if k != UPLOAD_FIELD and isinstance(v, str)}
        return fields, upload if hasattr(upload, "read") else None
    from chord_core.service.inputs import parse_json

    data = parse_json(await request.body(), _EXAMPLE)
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object",
                       "e.g. " + _EXAMPLE)
    return data, None


_EXAMPLE = '{"task": "describe", "video_path": "/data/media/clip.mp4"}'


def _parse_job(fields: dict[str, Any]) -> JobBody:
    from chord_core.service.inputs import unencodable_at

    where = unencodable_at(fields, "body")  # form fields too
    if where is not None:
        raise ApiError(400, f"{where} holds a lone UTF-16 surrogate, which is not text",
                       "send valid Unicode (UTF-8)")
    try:
        return JobBody.model_validate(fields)
    except ValidationError as exc:
        raise invalid_body(exc, "fields: task (describe|ground|entail; chapters|ground-long|"
                                "search-long: a long-video run), video_path or a "
                                "'file' upload, prompt/target/statement, max_new_tokens, fps, "
                                "max_frames, max_pixels, token_budget") from None


async def _media_path(body: JobBody | LongBody, upload: Any) -> str:
    from chord_core.service import media

    if upload is not None and body.video_path:
        raise ApiError(400, "send either a file or a video_path, not both", "")
    if upload is not None:
        # the upload is already spooled (bounded by the body limit); copy it off the loop
        await upload.seek(0)
        return str(await run_in_threadpool(
            media.save_stream, _iter_file(upload.file), upload.filename or ""))
    if not body.video_path:
        raise ApiError(400, "no input: send a 'file' upload or a 'video_path'",
                       "video_path must lie under the server's media roots (CHORD_MEDIA_ROOTS)")
    return str(await run_in_threadpool(media.resolve_media, body.video_path))


def _iter_file(fh: Any) -> Any:
    from chord_core.service.media import CHUNK

    while chunk := fh.read(CHUNK):
        yield chunk


def _analysis_request(body: JobBody, path: str, settings: Any) -> Any:
    """The job's request, within the server's caps (caps.py: over a cap is a 400)."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import MAX_NEW_TOKENS_DEFAULT
    from chord_core.media.roots import job_roots
    from chord_core.service.caps import capped_new_tokens, capped_sampling
    from chord_core.service.inputs import text_field

    sampling = capped_sampling(settings, body.task, fps=body.fps, max_frames=body.max_frames,
                               max_pixels=body.max_pixels, token_budget=body.token_budget)
    tokens = capped_new_tokens(settings, body.max_new_tokens, MAX_NEW_TOKENS_DEFAULT)
    return AnalysisRequest(path, body.task, text_field(body.text(), _TEXT_FIELD[body.task]),
                           sampling, max_new_tokens=tokens,
                           media_roots=job_roots())  # the worker re-checks at open


_TEXT_FIELD = {"describe": "prompt", "ground": "target", "entail": "statement"}


def _within_caps(req: Any, settings: Any) -> tuple[Any, Any]:
    """(the request fitted to the visual-token cap on its probed clip, the probe of a video:
    the manager is given it and does not probe again). Describe jobs need no probe here; an
    image is read from its header only (the manager checks it as for any job)."""
    from chord_core.analysis.request import probe_input
    from chord_core.service.caps import fit_to_cap

    if req.task == "describe":
        return req, None
    info = probe_input(req.video_path, decode_images=False)
    return fit_to_cap(settings, req, info), None if info.container == "image" else info


@router.post("/v1/jobs", status_code=202)
async def submit_job(request: Request) -> JSONResponse:
    """Queue one analysis; answers at once with the job id and where to look."""
    from chord_core.runtime.jobs import JobSpec

    fields, upload = await _body_and_upload(request)
    if fields.get("task") in LONG_TASKS:
        return await _submit_long(request, fields, upload)
    body = _parse_job(fields)
    req = _analysis_request(body, "", request.app.state.settings)  # caps before any file
    path = await _media_path(body, upload)
    req, info = await run_in_threadpool(_within_caps, replace(req, video_path=path),
                                        request.app.state.settings)
    # History names the job by the upload's own name (the stored file is named by its hash)
    label = body.label or _upload_name(upload) or f"api {body.task}"
    spec = JobSpec(req, model=None, label=label, info=info)
    (job_id,) = await _runtime(request).submit([spec])
    return JSONResponse({"job_id": job_id, "state": "queued", **links(job_id)}, 202)


async def _submit_long(request: Request, fields: dict[str, Any], upload: Any) -> JSONResponse:
    """A chapters / ground-long / search-long run (``long_routes``): checked, its clip
    found (under the media roots, or uploaded), started in this process as a parent job;
    answers at once with the parent's id."""
    body = parse_long(fields, request.app.state.settings)
    path = await _media_path(body, upload)
    runs = long_runs_of(_runtime(request))
    job = await run_in_threadpool(start_long, runs, body, path,
                                  body.label or _upload_name(upload))
    return JSONResponse({"job_id": job.job_id, "state": job.view()["state"],
                         "task": body.task, **links(job.job_id)}, 202)


def _upload_name(upload: Any) -> str:
    """An upload's file name without its folders, bounded (a label, never a path)."""
    name = Path(str(getattr(upload, "filename", "") or "")).name if upload is not None else ""
    return name[:200]


def job_view(request: Request, job_id: str) -> dict[str, Any]:
    """Status of a job from the manager, or the store; ApiError 404 when neither knows it."""
    rt = _runtime(request)
    long = long_runs_of(rt).get(job_id)
    if long is not None:  # a long run this process drives
        return long_job_view(long)
    st = rt.live_status(job_id)
    if st is not None:
        ev = st.last_event
        return {"job_id": job_id, "state": st.state.value, "task": st.spec.request.task,
                "query": st.spec.request.query, "submitted_at": st.submitted_at,
                "started_at": st.started_at, "finished_at": st.finished_at,
                "worker": st.worker, "progress": ev.to_dict() if ev else None,
                "error": job_error_view(st.error) if st.error else None,
                "pending_write": st.pending_write, **links(job_id)}
    row = rt.stored_job(job_id)
    if row is None:
        raise ApiError(404, f"no job {job_id!r}",
                       "use the job_id that POST /v1/jobs returned")
    view = row_view(row)  # a long run's parent: its progress and document
    if view is not None:
        return view
    return {"job_id": job_id, "state": row["state"], "task": row["task"], "query": row["query"],
            "submitted_at": row["submitted_at"], "started_at": row["started_at"],
            "finished_at": row["finished_at"], "worker": row["worker"],
            "progress": row["progress"],
            "error": job_error_view(row["error"]) if row["error"] else None, **links(job_id)}


@router.get("/v1/jobs/{job_id}")
async def get_job(request: Request, job_id: str) -> dict[str, Any]:
    return job_view(request, job_id)


@router.get("/v1/jobs/{job_id}/result")
async def get_result(request: Request, job_id: str) -> Any:
    """The ``chord.result/v1`` document; 409 while the job is unfinished or when it failed.
    A grounding job cancelled part-way answers with its finished frames (``partial``) while
    this process holds its status."""
    rt = _runtime(request)
    st = rt.live_status(job_id)
    if st is not None and st.result is not None:
        return st.result.to_dict()
    view = job_view(request, job_id)
    if view.get("document") is not None:  # a long run's: what the CLI's --json writes
        return view["document"]
    if view["state"] == "done":
        doc = await run_in_threadpool(rt.stored_result, job_id)
        if doc is not None:
            return doc
    if view["error"]:
        raise ApiError(409, f"job {job_id} {view['state']}: {view['error']['error']}",
                       view["error"]["hint"])
    raise ApiError(409, f"job {job_id} is {view['state']}; it has no result yet",
                   f"poll GET /v1/jobs/{job_id} or follow /v1/jobs/{job_id}/events")


@router.delete("/v1/jobs/{job_id}")
async def cancel_job(request: Request, job_id: str) -> dict[str, Any]:
    rt = _runtime(request)
    view = job_view(request, job_id)
    long = long_runs_of(rt).get(job_id)
    if long is not None and view["state"] not in FINISHED_STATES:  # its stage stops now
        await run_in_threadpool(long.cancel.set)  # its children are cancelled in there
        return job_view(request, job_id)
    if long is not None:
        cancelled = False
    elif rt.live_status(job_id) is not None:  # a job of this process
        cancelled = await run_in_threadpool(rt.manager.cancel, job_id)
    else:  # a parent (a /batch_predict request): its children stop
        cancelled = bool(await run_in_threadpool(rt.cancel_children, job_id))
    if not cancelled:
        raise ApiError(409, f"job {job_id} is {view['state']}; only a queued or running job "
                            "of this service can be cancelled", "")
    return job_view(request, job_id)


@router.get("/v1/jobs/{job_id}/events")
async def job_events(request: Request, job_id: str) -> StreamingResponse:
    """Progress as server-sent events: ``progress`` per step, ``state`` per change, then one
    ``end`` event with the final status, and the stream closes."""
    view = job_view(request, job_id)  # a 404 before the stream starts
    long = long_runs_of(_runtime(request)).get(job_id)
    return StreamingResponse(long_events(long) if long is not None else
                             _events(request, job_id, view), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})


def _events(request: Request, job_id: str, view: dict[str, Any]) -> AsyncIterator[str]:
    """Stream the job's changes as they happen: its handle wakes this generator (started,
    progress, finished), nothing polls. A job only the store knows (finished, or another
    process's) gets its state and the end at once. Starlette ends the stream when the
    client disconnects."""
    handle = _live_handle(request, job_id)
    first: dict[str, Any] | None = None if handle else view
    last_progress: list[Any] = [None]

    def read() -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        nonlocal first
        now, first = first or job_view(request, job_id), None
        if now["progress"] is None or now["progress"] == last_progress[0]:
            return now, []
        last_progress[0] = now["progress"]
        return now, [("progress", now["progress"])]
    return change_stream(handle.on_change if handle else None, read,
                         lambda state: state in FINISHED_STATES, EVENTS_MAX_S)


def _live_handle(request: Request, job_id: str) -> Any:
    """The handle of a job this process's manager holds, else None."""
    try:
        return _runtime(request).manager.handle(job_id)
    except KeyError:
        return None
