"""Review items, asking across the library, and cases over HTTP.

    GET  /v1/review?source=&severity=alert|detection&reviewed=true|false&statement=&day=&limit=
         → chord.review-items/v1 (library/review.py), newest first
    POST /v1/review/mark   {"ids": ["a12", …], "reviewed": true, "by": "ana"}
                           or {"all": true, "source": …, "severity": …, "statement": …, "day": …}
         → {"changed": N}
    GET  /v1/review/thumbnail?item=a12   → image/jpeg, the item's moment (320 px)
    POST /v1/ask           {"question": "…", "check": 5, "candidates": 20, "threshold": 0.5}
         → chord.ask/v1 (library/ask.py): search, the best hits checked on their frames by
           entailment with the service's model, the answer citing clip@time
    GET  /v1/cases                       → {"cases": [{name, moments, …}]}
    POST /v1/cases/{name}/items {"ids": ["a12", …]}  review items into a case → {"added": N}
                           or {"hit": {"source": …, "start_s": …, "end_s": …}}  a search hit
                           or {"job_id": …, "start_s": …, "end_s": …, "label": ""}  a span of
                           a done job's clip (within the clip; the label defaults to the
                           segment's or the query)
    GET  /v1/cases/{name}/export         → application/zip, streamed (clips cut at the
                           moments, stills, case.json, reports; clips read under the roots)

Behind the API key like every route but /health. Every field is bounded (pydantic; lengths
and ranges below); items are named by id and cases by name, never by a path.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from chord_core.service.http_errors import ApiError
from chord_core.service.library_routes import library_index

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

router = APIRouter()
MAX_S = 7 * 86400.0
EXPORT_CHUNK = 1 << 20
_exporting = threading.Lock()  # one case export at a time: each cuts clips, reads files


class MarkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(default_factory=list, max_length=1000)
    reviewed: bool = True
    by: str = Field("", max_length=80)
    all: bool = False
    source: str = Field("", max_length=4096)
    severity: str = Field("", max_length=16)
    statement: str = Field("", max_length=200)
    day: str = Field("", max_length=10)


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(..., min_length=1, max_length=200)
    check: int = Field(5, ge=1, le=20)
    candidates: int = Field(20, ge=1, le=100)
    threshold: float = Field(0.5, gt=0.0, le=1.0)


class HitBody(BaseModel):
    """A search hit as GET /v1/search returned it: its source and span name the passage."""

    model_config = ConfigDict(extra="ignore")  # a whole hit may be sent back as it came

    source: str = Field(..., min_length=1, max_length=64)
    start_s: float = Field(..., ge=0.0, le=MAX_S)
    end_s: float = Field(..., ge=0.0, le=MAX_S)


class CaseItemsBody(BaseModel):
    """One of: review item ids; a search hit; a finished job and a span of its clip."""

    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(default_factory=list, max_length=500)
    hit: HitBody | None = None
    job_id: str = Field("", max_length=64)
    start_s: float = Field(0.0, ge=0.0, le=MAX_S)
    end_s: float = Field(0.0, ge=0.0, le=MAX_S)
    label: str = Field("", max_length=500)


def _reviewed(value: str) -> bool | None:
    if value in ("", "any"):
        return None
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ApiError(400, f"reviewed={value[:20]!r} is not true or false",
                   "give reviewed=true, reviewed=false, or leave it out for both")


@router.get("/v1/review")
async def review_items(request: Request, source: str = Query("", max_length=4096),
                       severity: str = Query("", max_length=16),
                       reviewed: str = Query("", max_length=8),
                       statement: str = Query("", max_length=200),
                       day: str = Query("", max_length=10),
                       limit: int = Query(200, ge=1, le=1000)) -> Any:
    from chord_core.library.review import ReviewFilters, listing

    filters = ReviewFilters(source, severity, _reviewed(reviewed), statement, day)
    return await run_in_threadpool(listing, library_index(request), filters, limit=limit)


@router.post("/v1/review/mark")
async def mark_items(request: Request, body: MarkBody) -> dict[str, Any]:
    from chord_core.library.review import ReviewFilters, mark, mark_all

    index = library_index(request)
    if body.all:
        if body.ids:
            raise ApiError(400, "give ids or all, not both",
                           'e.g. {"ids": ["a12"]} or {"all": true, "severity": "alert"}')
        filters = ReviewFilters(body.source, body.severity, None, body.statement, body.day)
        changed = await run_in_threadpool(lambda: mark_all(index, filters, by=body.by))
    else:
        changed = await run_in_threadpool(
            lambda: mark(index, body.ids, reviewed=body.reviewed, by=body.by))
    return {"changed": changed}


def _item(index: LibraryIndex, item_id: str) -> dict[str, Any]:
    from chord_core.library.review import check_ids, items

    [wanted] = check_ids([item_id])
    found = [i for i in items(index, limit=1000) if i["id"] == wanted]
    if not found:
        raise ApiError(404, f"no review item {wanted}", "use an id from GET /v1/review")
    return found[0]


@router.get("/v1/review/thumbnail")
async def item_thumbnail(request: Request, item: str = Query(..., max_length=20)) -> Response:
    from chord_core.config import default_data_dir
    from chord_core.library.thumbs import thumbnail
    from chord_core.media.roots import job_roots

    index = library_index(request)
    found = await run_in_threadpool(_item, index, item)
    data = await run_in_threadpool(lambda: thumbnail(  # opened under the roots, now
        found["path"], found["thumbnail_s"], default_data_dir() / "thumbs", roots=job_roots()))
    return Response(data, media_type="image/jpeg",
                    headers={"Cache-Control": "private, max-age=3600"})


@router.post("/v1/ask")
async def ask_library(request: Request, body: AskBody) -> Any:
    from chord_core.library.ask import ask

    runtime = request.app.state.runtime
    index = library_index(request)
    timeout = float(request.app.state.settings.request_timeout_s)
    return await run_in_threadpool(
        lambda: ask(index, body.question, runtime.manager, runtime.model, check=body.check,
                    candidates=body.candidates, threshold=body.threshold, timeout_s=timeout))


@router.get("/v1/cases")
async def list_cases(request: Request) -> dict[str, Any]:
    from chord_core.library.cases import cases

    return {"cases": await run_in_threadpool(cases, library_index(request))}


@router.post("/v1/cases/{name}/items")
async def case_items(request: Request, name: str, body: CaseItemsBody) -> dict[str, Any]:
    """Review items by id, a search hit, or a finished job's span into the case ``name``
    (made when new). The clip is always the store's (the item's, the passage's or the
    result's), never a path from the request."""
    from chord_core.library import cases

    index = library_index(request)
    case = cases.check_name(name)
    given = sum((bool(body.ids), body.hit is not None, bool(body.job_id)))
    if given != 1:
        raise ApiError(400, "give one of ids, hit, or job_id with start_s and end_s",
                       'e.g. {"ids": ["a12"]}, {"hit": {"source": …, "start_s": 1, '
                       '"end_s": 2}} or {"job_id": …, "start_s": 1, "end_s": 2}')
    if body.job_id:
        _finished_job(request, body.job_id)
        added = await run_in_threadpool(lambda: cases.add_job_span(
            index, case, body.job_id, body.start_s, body.end_s, body.label))
        return {"added": int(added)}
    if body.hit is not None:
        hit = body.hit
        added = await run_in_threadpool(lambda: cases.add_passage(
            index, case, hit.source, hit.start_s, hit.end_s))
        return {"added": int(added)}

    def add() -> int:
        return sum(cases.add_review_item(index, case, _item(index, i)) for i in body.ids)

    return {"added": await run_in_threadpool(add)}


def _finished_job(request: Request, job_id: str) -> None:
    """404 for a job the store does not know, 409 for one without a result yet."""
    row = request.app.state.runtime.stored_job(job_id)
    if row is None:
        raise ApiError(404, f"no job {job_id!r}", "use a job_id that GET /v1/jobs lists")
    if row["state"] != "done":
        raise ApiError(409, f"job {job_id} is {row['state']}: it has no result to take "
                            "a moment from", "wait until it is done, or pick another job")


@router.get("/v1/cases/{name}/export")
async def export_case_zip(request: Request, name: str) -> StreamingResponse:
    """The case as one ZIP (case_export.py: clips cut at the moments, stills, case.json,
    reports), streamed. Each clip is read under the media roots again; the ZIP is made in
    the data folder and removed once sent. One export at a time (429 while one runs)."""
    import tempfile

    from chord_core.config import default_data_dir
    from chord_core.library.case_export import export_case
    from chord_core.library.cases import check_name, moments

    index = library_index(request)
    case = check_name(name)
    if not await run_in_threadpool(moments, index, case):
        raise ApiError(404, f"no case {case!r} with moments",
                       "add moments with POST /v1/cases/{name}/items; GET /v1/cases lists them")
    if not _exporting.acquire(blocking=False):
        raise ApiError(429, "another case is being exported", "try again in a moment")
    tmp: Path | None = None
    try:
        out = default_data_dir() / "exports" / "cases"
        out.mkdir(parents=True, exist_ok=True)
        tmp = dest = Path(tempfile.mkdtemp(dir=out, prefix=".api-"))
        archive = await run_in_threadpool(lambda: export_case(index, case, dest, as_zip=True))
        fh = open(archive, "rb")  # noqa: SIM115 (closed by the stream)
    finally:
        _exporting.release()
        if tmp is not None:  # the open handle keeps the bytes until the stream closes it
            _remove(tmp)
    return StreamingResponse(_stream(fh), media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{archive.name}"'.encode(
            "ascii", "replace").decode()})


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _stream(fh: Any) -> Iterator[bytes]:
    with fh:
        while chunk := fh.read(EXPORT_CHUNK):
            yield chunk
