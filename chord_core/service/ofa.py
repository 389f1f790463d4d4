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

``think_tokens`` (optional, beside ``tasks``) is a Thinking model's reasoning budget for every
task of the request: each row reasons up to that many tokens (it stops at its own
``</think>``), then its answer word is scored. A whole number from 1 to the server's cap on new
tokens (``CHORD_API_MAX_NEW_TOKENS``); left out, the engine's default (512, lowered to the
cap). An Instruct model scores the first token and never reasons, whatever it says.

The body is spooled to a private file as it arrives and read by the reader processes
(``readers.py``), a share of the tasks each (``SHARD_BYTES``): its JSON, the base64, the
check of every image's format and header and the files written — the service process
queues the jobs that come back. Each image is decoded once, by the worker that scores it (a
file that does not decode fails its own task there, with the same error entry).
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field
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
CHECK_THREADS = 4  # threads per reader that check and store a request's images
SHARD_BYTES = 2 << 20  # a body this big or bigger is read by several readers side by side


class BatchBody(BaseModel):
    """The request's schema (for /openapi.json; the body itself is read in a reader)."""
    model_config = ConfigDict(extra="allow")

    tasks: list[Any]
    think_tokens: int | None = Field(
        None, ge=1, description="a Thinking model's reasoning budget per task (1 to the "
                                "server's cap on new tokens; default 512)")


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


def _prepare(index: int, task: Any, sampling: Any = None, folder: Any = None,
             think: int | None = None, model: str | None = None) -> tuple[Any, Any]:
    """(id, JobSpec) for a good task; raises ChordError (its own error entry) otherwise.
    ``model``: the served model, for the task's content key (made here, where the image was
    hashed as it was stored, instead of by the service reading every file again)."""
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
    path, info = save_image_probed(data, folder=folder, decode=False)
    request = AnalysisRequest(str(path), "entail", statement)
    if sampling is not None:
        request = replace(request, sampling=sampling)
    if think is not None:
        request = replace(request, max_new_tokens=think)
    # the image's header was read just now: the manager need not probe it again
    spec = JobSpec(request, model=None, label="api batch_predict", info=info)
    return task.get("id", index), spec if model is None else _with_key(spec, model)


def read_batch_file(path: str, max_tasks: int, sampling: Any = None,
                    shard: tuple[int, int] = (0, 1), think_cap: int | None = None,
                    model: str | None = None) -> BatchIntake:
    """``read_batch`` on a spooled body (the route removes the file afterwards)."""
    with open(path, "rb") as fh:
        return read_batch(fh.read(), max_tasks, sampling, shard, think_cap, model)


def shard_count(body_bytes: int, readers: int) -> int:
    """How many readers read one body side by side: one per ``SHARD_BYTES``, at most all."""
    return max(1, min(readers, body_bytes // SHARD_BYTES))


def read_batch(body: bytes, max_tasks: int, sampling: Any = None,
               shard: tuple[int, int] = (0, 1), think_cap: int | None = None,
               model: str | None = None) -> BatchIntake:
    """A request body read and its tasks checked and stored (in a reader process): all of
    them, or for ``shard=(k, n)`` the k-th of n equal runs of them (each reader parses the
    JSON, then checks its own run; ``merge_shards`` joins them in order). The tasks are
    checked on a few threads: base64, hashing and file writes let go of the interpreter
    lock, so a request's images are checked side by side. The request's pixel budget is
    applied to the joined tasks (``within_pixels``); ``think_cap`` bounds ``think_tokens``
    (``think_budget``); ``model`` given, each good task's spec carries its content key."""
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
    think = think_budget(doc.get("think_tokens"), think_cap)
    if isinstance(think, tuple):
        return BatchIntake(refusal=think)
    from chord_core.service.media import api_uploads_dir

    read = BatchIntake(out=[None] * len(tasks))
    k, n = shard
    mine = range(k * len(tasks) // n, (k + 1) * len(tasks) // n)
    if not mine:
        return read
    folder = api_uploads_dir()
    with ThreadPoolExecutor(min(CHECK_THREADS, len(mine))) as pool:
        checked = list(pool.map(lambda i: _checked(i, tasks[i], sampling, folder, think,
                                                   model), mine))
    for i, (task_id, spec, entry) in zip(mine, checked):
        if entry is not None:
            read.out[i] = entry
        else:
            read.ids.append(task_id)
            read.specs.append(spec)
            read.slots.append(i)
    return read


def think_budget(asked: Any, cap: int | None) -> int | None | tuple[int, str, str]:
    """The request's reasoning budget: None (left out: the engine's default, lowered to
    ``cap``), the whole number asked (1 up to ``cap``), or the refusal (status, error, hint)."""
    from chord_core.config import MAX_NEW_TOKENS_DEFAULT

    if asked is None:
        return None if cap is None or cap >= MAX_NEW_TOKENS_DEFAULT else cap
    limit = f"1 to {cap:,}" if cap is not None else "at least 1"
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
        return (422, f"think_tokens must be a whole number ({limit}), got {asked!r}",
                'e.g. {"think_tokens": 256, "tasks": [...]}, or leave it out for the default')
    if cap is not None and asked > cap:
        return (400, f"think_tokens {asked:,} is over this server's cap of {cap:,}",
                f"ask for at most {cap:,} (CHORD_API_MAX_NEW_TOKENS sets the cap)")
    return asked


def merge_shards(reads: list[BatchIntake]) -> BatchIntake:
    """The shards of one body (``read_batch`` with ``shard=(k, n)``, k = 0…n-1) as one read:
    the first refusal, else every slot's entry and the good tasks in request order."""
    refused = next((r for r in reads if r.refusal), None)
    if refused is not None or len(reads) == 1:
        return refused or reads[0]
    out = BatchIntake(out=[None] * len(reads[0].out))
    for r in reads:
        for i, entry in enumerate(r.out):
            if entry is not None:
                out.out[i] = entry
        out.ids += r.ids
        out.specs += r.specs
        out.slots += r.slots
    return out


def within_pixels(read: BatchIntake) -> BatchIntake:
    """The good tasks in order until the request's images pass ``CHORD_MAX_REQUEST_PIXELS``
    in all (``media.images.PixelBudget``); each task past it gets that error entry, not a
    job."""
    from chord_core.media.images import PixelBudget

    budget, kept = PixelBudget(), BatchIntake(out=read.out, refusal=read.refusal)
    for task_id, spec, slot in zip(read.ids, read.specs, read.slots):
        try:
            budget.take(spec.info, f"task {task_id}'s image")
        except ChordError as exc:
            api = from_chord_error(exc)
            kept.out[slot] = {"id": task_id, "error": api.message, "hint": api.hint}
            continue
        kept.ids.append(task_id)
        kept.specs.append(spec)
        kept.slots.append(slot)
    return kept


def _checked(index: int, task: Any, sampling: Any = None, folder: Any = None,
             think: int | None = None, model: str | None = None
             ) -> tuple[Any, Any, dict[str, Any] | None]:
    """(id, JobSpec, None) for a good task; (None, None, its error entry) for a bad one."""
    try:
        return (*_prepare(index, task, sampling, folder, think, model), None)
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
async def batch_predict(request: Request, response: Response) -> dict[str, Any]:
    """Visual entailment for many image + statement pairs in one request. The answer's
    ``Server-Timing`` header says where its time went (``stage_header``)."""
    settings, rt = request.app.state.settings, request.app.state.runtime
    from chord_core.service.caps import capped_sampling

    sampling = capped_sampling(settings, "entail")  # the server's caps, as for every job
    marks = [("", time.perf_counter())]
    spooled = await spool_body(request)
    marks.append(("spool", time.perf_counter()))
    try:
        read = await _read(request.app.state.readers, spooled, settings.max_tasks, sampling,
                           settings.max_new_tokens, rt.model)
    finally:
        spooled.unlink(missing_ok=True)
    if read.refusal:
        raise ApiError(*read.refusal)
    read = within_pixels(read)
    marks.append(("read", time.perf_counter()))
    out, ids, specs, slots = read.out, read.ids, read.specs, read.slots
    if specs:
        specs, parent_id = await run_in_threadpool(keyed, specs, ids, rt.model)
        job_ids = await rt.submit_parent(parent_id, specs, label="api batch_predict")
        marks.append(("queue", time.perf_counter()))
        try:
            statuses = await rt.wait_all(job_ids, settings.request_timeout_s, request,
                                          parent=parent_id)
        except TimeoutError:
            await rt.stopped_waiting(parent_id)
            raise ApiError(503, f"the tasks took longer than {settings.request_timeout_s:g} s "
                                "and were cancelled",
                           "send fewer tasks per request, or raise CHORD_API_TIMEOUT_S",
                           {"Retry-After": "10"}) from None
        except ClientGone:
            await rt.stopped_waiting(parent_id)
            raise
        marks.append(("jobs", time.perf_counter()))
        for slot, task_id, st in zip(slots, ids, statuses):
            out[slot] = prediction(task_id, st)
    marks.append(("answer", time.perf_counter()))
    response.headers["Server-Timing"] = stage_header(marks)
    return {"predictions": out, "model": rt.model}


def stage_header(marks: list[tuple[str, float]]) -> str:
    """A ``Server-Timing`` header (W3C) from (stage, time it ended) marks, the first the
    start: ``spool`` (the body received), ``read`` (parsed, images checked and stored),
    ``queue`` (keyed, the jobs stored and queued), ``jobs`` (the workers' scoring, waited
    on), ``answer`` (the predictions built), each ``;dur=`` in milliseconds."""
    return ", ".join(f"{name};dur={1000 * (t - marks[i][1]):.1f}"
                     for i, (name, t) in enumerate(marks[1:]))


async def _read(readers: Any, spooled: Any, max_tasks: int, sampling: Any,
                think_cap: int, model: str) -> BatchIntake:
    """The spooled body read by one reader, or a big one by several side by side (each
    good task keyed for ``model`` there)."""
    import asyncio

    n = shard_count(spooled.stat().st_size, readers.processes)
    reads = await asyncio.gather(*(readers.run(read_batch_file, str(spooled), max_tasks,
                                               sampling, (k, n), think_cap, model)
                                   for k in range(n)))
    return merge_shards(list(reads))


def keyed(specs: list[Any], ids: list[Any], model: str) -> tuple[list[Any], str]:
    """Each task's spec with its content key (the stored image's bytes, the statement, the
    model, the sampling) and the request's parent id (``bp-`` + a key of its ids and tasks):
    a request sent again — after a timeout, or a crash of the service — is the same parent
    and the same jobs, so no task is scored twice."""
    import hashlib

    out = [s if s.key else _with_key(s, model) for s in specs]  # a reader keyed most
    ident = json.dumps([[str(i), s.key] for i, s in zip(ids, out)])
    return out, "bp-" + hashlib.sha256(ident.encode()).hexdigest()[:12]


def _with_key(spec: Any, model: str) -> Any:
    """``spec`` with its content key (the image's bytes, the statement, the model, the
    sampling, the token budget)."""
    from dataclasses import replace

    from chord_core.runtime.batch import request_key

    r = spec.request
    return replace(spec, key=request_key(r.video_path, "entail", r.query, model, r.sampling,
                                         r.max_new_tokens))
