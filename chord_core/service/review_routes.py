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

Behind the API key like every route but /health. Every field is bounded (pydantic; lengths
and ranges below); items are named by id and cases by name, never by a path.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from chord_core.service.http_errors import ApiError
from chord_core.service.library_routes import library_index

router = APIRouter()


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


class CaseItemsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ids: list[str] = Field(..., min_length=1, max_length=500)


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


def _item(index: Any, item_id: str) -> dict[str, Any]:
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
    from chord_core.library.cases import add_review_item, check_name

    index = library_index(request)
    case = check_name(name)

    def add() -> int:
        return sum(add_review_item(index, case, _item(index, i)) for i in body.ids)

    return {"added": await run_in_threadpool(add)}
