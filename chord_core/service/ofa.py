"""OFA-VE's batch API: ``POST /batch_predict`` with ``{"tasks": [{"image_data", "text",
"id"?}]}`` → ``{"predictions": [...]}``, one per task, in order.

The request is a parent job (``bp-…``, a key of its tasks: the same request sent again is the
same parent) whose children are ordinary ``entail`` jobs (image + statement, each with a
content key: a task the store has done is not scored again). All are submitted before any is
awaited, so the manager scores them in shared prefill batches over every worker. A bad task
(undecodable or empty image, empty text) gets its own ``{"id", "error", "hint"}`` entry and
never costs the others their answers. A prediction carries OFA-VE's word (``entailment``:
yes / maybe / no), the label name (entailment / neutral / contradiction), ``confidence`` (the
verdict's probability) and all three ``probabilities``.

The body is spooled to a private file as it arrives and read in a reader process
(``readers.py``): its JSON, the base64, the check of every image and the files written —
the service process queues the jobs that come back.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from chord_core.errors import ChordError, DiskFullError, JobCancelled
from chord_core.service.http_errors import (
    GENERIC_500,
    ApiError,
    from_chord_error,
    job_error_entry,
)
from chord_core.service.inputs import unencodable_at
from chord_core.service.readers import spool_body
from chord_core.service.runtime import ClientGone

log = logging.getLogger(__name__)
router = APIRouter()

OFA_WORD = {"entailment": "yes", "neutral": "maybe", "contradiction": "no"}
IMAGE_KEYS = ("image_data", "image")
TEXT_KEYS = ("text", "statement", "hypothesis")
CHECK_THREADS = 4  # threads per request that decode, check and store its images


class BatchBody(BaseModel):
    """The request's schema (for /openapi.json; the body itself is read in a reader)."""
    model_config = ConfigDict(extra="allow")

    tasks: list[Any]


@dataclass
class BatchIntake:
    """A read request: the output slots (bad tasks' error entries filled in) and the ids,
    job specs and slots of the good tasks — or why the whole request is refused."""

    out: list[Any] = field(default_factory=list)
    ids: list[Any] = field(default_factory=list)
    specs: list[Any] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)
    refusal: tuple[int, str, str] | None = None


def _first(task: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((task[k] for k in keys if k in task), None)


def _prepare(index: int, task: Any, sampling: Any = None) -> tuple[Any, Any]:
    """(id, JobSpec) for a good task; raises ChordError (its own error entry) otherwise."""
    from chord_core.analysis.entailment import clean_statement
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.errors import InputError
    from chord_core.runtime.jobs import JobSpec
    from chord_core.service.inputs import text_field
    from chord_core.service.media import decode_base64, save_image_probed

    if not isinstance(task, dict):
        raise InputError(f"task {index} is not an object",
                         hint='each task is {"image_data": <base64>, "text": "…"}')
    image = _first(task, IMAGE_KEYS)
    if image is None:
        raise InputError(f"task {index} has no image_data",
                         hint="add the image as base64 in image_data")
    where = unencodable_at(task, f"task {index}")
    if where is not None:
        raise InputError(f"{where} holds a lone UTF-16 surrogate, which is not text",
                         hint="send valid Unicode (UTF-8)")
    statement = clean_statement(text_field(_first(task, TEXT_KEYS), f"task {index}: text"))
    data, _ = decode_base64(image, "image_data")
    path, info = save_image_probed(data)
    request = AnalysisRequest(str(path), "entail", statement,
                              *(() if sampling is None else (sampling,)))
    # the image was decoded just now: the manager need not probe it again
    return task.get("id", index), JobSpec(request, model=None, label="api batch_predict",
                                          info=info)


def read_batch_file(path: str, max_tasks: int, sampling: Any = None) -> BatchIntake:
    """``read_batch`` on a spooled body (the route removes the file afterwards)."""
    with open(path, "rb") as fh:
        return read_batch(fh.read(), max_tasks, sampling)


def read_batch(body: bytes, max_tasks: int, sampling: Any = None) -> BatchIntake:
    """A request body read and every task checked and stored (in a reader process). The
    tasks are checked on a few threads: Pillow, hashing and file writes let go of the
    interpreter lock, so a request's images are checked side by side."""
    shape = 'send {"tasks": [{"image_data": <base64>, "text": "…"}]}'
    try:
        doc = json.loads(body)
    except RecursionError:
        return BatchIntake(refusal=(400, "the request body is nested too deeply to read",
                                    shape))
    except ValueError:  # UnicodeDecodeError is a ValueError
        return BatchIntake(refusal=(400, "the request body is not valid JSON",
                                    shape + " with Content-Type: application/json"))
    del body
    if not isinstance(doc, dict):
        return BatchIntake(refusal=(422, "the body is not a JSON object", shape))
    tasks = doc.get("tasks")
    if not isinstance(tasks, list):
        what = "is missing" if tasks is None else "is not a list"
        return BatchIntake(refusal=(422, f"tasks {what}", shape))
    if not tasks:
        return BatchIntake(refusal=(400, "tasks is empty", shape))
    if len(tasks) > max_tasks:
        return BatchIntake(refusal=(
            413, f"{len(tasks)} tasks in one request; the limit is {max_tasks}",
            "split them over several requests (CHORD_API_MAX_TASKS sets the limit)"))
    read = BatchIntake(out=[None] * len(tasks))
    with ThreadPoolExecutor(min(CHECK_THREADS, len(tasks))) as pool:
        checked = list(pool.map(_checked, range(len(tasks)), tasks,
                                [sampling] * len(tasks)))
    checked = _within_pixels(checked)
    for i, (task_id, spec, entry) in enumerate(checked):
        if entry is not None:
            read.out[i] = entry
        else:
            read.ids.append(task_id), read.specs.append(spec), read.slots.append(i)
    return read


def _within_pixels(checked: list[tuple[Any, Any, Any]]) -> list[tuple[Any, Any, Any]]:
    """Tasks in order until the request's images pass ``CHORD_MAX_REQUEST_PIXELS`` in all
    (``media.images.PixelBudget``); each task past it gets that error entry, not a job."""
    from chord_core.media.images import PixelBudget

    budget, out = PixelBudget(), []
    for task_id, spec, entry in checked:
        if entry is None:
            try:
                budget.take(spec.info, f"task {task_id}'s image")
            except ChordError as exc:
                api = from_chord_error(exc)
                task_id, spec, entry = None, None, {"id": task_id, "error": api.message,
                                                    "hint": api.hint}
        out.append((task_id, spec, entry))
    return out


def _checked(index: int, task: Any, sampling: Any = None
             ) -> tuple[Any, Any, dict[str, Any] | None]:
    """(id, JobSpec, None) for a good task; (None, None, its error entry) for a bad one."""
    try:
        return (*_prepare(index, task, sampling), None)
    except DiskFullError:
        raise  # no task can be stored: the whole request is a 507
    except ChordError as exc:
        api = from_chord_error(exc)
    except Exception:  # a bug on one task's input must not cost the others their answers
        log.exception("task %d of a /batch_predict request failed", index)
        api = ApiError(500, GENERIC_500["error"], GENERIC_500["hint"])
    tid = task.get("id", index) if isinstance(task, dict) else index
    if unencodable_at(tid) is not None:
        tid = index  # an id that is not text cannot be sent back
    return None, None, {"id": tid, "error": api.message, "hint": api.hint}


def prediction(task_id: Any, status: Any) -> dict[str, Any]:
    """One OFA-VE prediction from a finished entail job."""
    if status.result is None or status.result.entailment is None:
        return {"id": task_id, **job_error_entry(
            status.error or JobCancelled("the task was cancelled").to_dict())}
    ent = status.result.entailment
    probs = {k: round(float(v), 6) for k, v in ent.probabilities.items()}
    return {"id": task_id, "entailment": OFA_WORD[ent.verdict], "label": ent.verdict,
            "confidence": probs[ent.verdict], "probabilities": probs,
            "job_id": status.job_id}


_BODY_SCHEMA = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": BatchBody.model_json_schema()}}}}


@router.post("/batch_predict", openapi_extra=_BODY_SCHEMA)
async def batch_predict(request: Request) -> dict[str, Any]:
    """Visual entailment for many image + statement pairs in one request."""
    settings, rt = request.app.state.settings, request.app.state.runtime
    from chord_core.service.caps import capped_sampling

    sampling = capped_sampling(settings, "entail")  # the server's caps, as for every job
    spooled = await spool_body(request)
    try:
        read = await request.app.state.readers.run(read_batch_file, str(spooled),
                                                    settings.max_tasks, sampling)
    finally:
        spooled.unlink(missing_ok=True)
    if read.refusal:
        raise ApiError(*read.refusal)
    out, ids, specs, slots = read.out, read.ids, read.specs, read.slots
    if specs:
        specs, parent_id = await run_in_threadpool(keyed, specs, ids, rt.model)
        job_ids = await rt.submit_parent(parent_id, specs, label="api batch_predict")
        try:
            statuses = await rt.wait_all(job_ids, settings.request_timeout_s, request,
                                          parent=parent_id)
        except TimeoutError:
            await rt.end_parent(parent_id, None)
            raise ApiError(503, f"the tasks took longer than {settings.request_timeout_s:g} s "
                                "and were cancelled",
                           "send fewer tasks per request, or raise CHORD_API_TIMEOUT_S",
                           {"Retry-After": "10"}) from None
        except ClientGone:
            await rt.end_parent(parent_id, None)
            raise
        await rt.end_parent(parent_id, statuses)
        for slot, task_id, st in zip(slots, ids, statuses):
            out[slot] = prediction(task_id, st)
    return {"predictions": out, "model": rt.model}


def keyed(specs: list[Any], ids: list[Any], model: str) -> tuple[list[Any], str]:
    """Each task's spec with its content key (the stored image's bytes, the statement, the
    model, the sampling) and the request's parent id (``bp-`` + a key of its ids and tasks):
    a request sent again — after a timeout, or a crash of the service — is the same parent
    and the same jobs, so no task is scored twice."""
    import hashlib
    from dataclasses import replace

    from chord_core.runtime.batch import request_key

    out = [replace(s, key=request_key(s.request.video_path, "entail", s.request.query, model,
                                      s.request.sampling, s.request.max_new_tokens))
           for s in specs]
    ident = json.dumps([[str(i), s.key] for i, s in zip(ids, out)])
    return out, "bp-" + hashlib.sha256(ident.encode()).hexdigest()[:12]
