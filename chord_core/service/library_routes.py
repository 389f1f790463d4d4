"""The library over HTTP: ``GET /v1/search``, a hit's thumbnail, and the alerts.

    GET /v1/search?q=…&folder=…&date_from=YYYY-MM-DD&date_to=…&task=…&limit=20
        → chord.library-search/v1 (hits ranked by bm25; see chord_core/library/search.py),
          with ``index``: whether it is complete (a big backlog is indexed behind, in steps:
          library/catch_up.py)
    GET /v1/library/thumbnail?source=<job or run id>&t=<seconds>   → image/jpeg
    GET /v1/alerts                  the newest alerts of the watch folders' standing checks
    GET /v1/alerts/events?after=ID  the alerts as server-sent events, as they are stored

Behind the API key like every route but /health (the router is included with it). ``q`` is
at most 200 characters and ``limit`` 1–100 (a 400 with a hint otherwise). The thumbnail
names a job, never a path: only clips the store says were analysed are read, and only under
the media roots, checked where the file is opened (a clip swapped for a link is refused).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from chord_core.service.http_errors import ApiError

router = APIRouter()


def library_index(request: Request) -> Any:
    """The app's one ``LibraryIndex`` over the runtime's store, opened on first use."""
    from chord_core.library.index import LibraryIndex, store_path

    state = request.app.state
    index = getattr(state, "library_index", None)
    if index is None:
        store = getattr(state.runtime, "store", None)
        if store is None:
            raise ApiError(503, "this service keeps no job store, so it has no library",
                           "start it with a data folder (CHORD_DATA_DIR) to search results")
        index = state.library_index = LibraryIndex(store_path(store))
    return index


@router.get("/v1/search")
async def search_library(request: Request, q: str = Query(..., max_length=200),
                         folder: str = Query("", max_length=4096),
                         date_from: str = Query("", max_length=32),
                         date_to: str = Query("", max_length=32),
                         task: str = Query("", max_length=16),
                         limit: int = Query(20, ge=1, le=100)) -> Any:
    """Ranked hits across every clip analysed (description, chapters, targets, statements,
    file names), filtered by folder, date and task."""
    from chord_core.library.catch_up import behind_note, catch_up
    from chord_core.library.search import Filters, search

    index = library_index(request)
    filters = Filters(folder=folder, date_from=date_from, date_to=date_to, task=task)
    complete = await run_in_threadpool(catch_up, index)  # bounded: the rest goes behind
    doc = await run_in_threadpool(lambda: search(index, q, filters=filters, limit=limit,
                                                 sync=False))
    return {**doc, "index": behind_note(complete)}


@router.get("/v1/library/thumbnail")
async def hit_thumbnail(request: Request, source: str = Query(..., max_length=64),
                        t: float = Query(0.0, ge=0.0, le=7 * 86400.0)) -> Response:
    """The frame of the job's clip at ``t`` seconds, 320 px wide."""
    from chord_core.config import default_data_dir
    from chord_core.library.thumbs import thumbnail
    from chord_core.media.roots import job_roots

    index = library_index(request)
    rows = index.read("SELECT video_path FROM library_passages WHERE source = ? LIMIT 1",
                      (source,))
    if not rows:
        raise ApiError(404, f"no library entry {source!r}",
                       "use a hit's 'source' from GET /v1/search")
    data = await run_in_threadpool(lambda: thumbnail(  # opened under the roots, now
        rows[0]["video_path"], t, default_data_dir() / "thumbs", roots=job_roots()))
    return Response(data, media_type="image/jpeg",
                    headers={"Cache-Control": "private, max-age=3600"})


@router.get("/v1/alerts")
async def alerts(request: Request, limit: int = Query(50, ge=1, le=500)) -> Any:
    """The newest alerts of the watch folders' standing checks, newest first."""
    from chord_core.library.alerts import latest_alerts

    index = library_index(request)
    return {"alerts": await run_in_threadpool(latest_alerts, index, limit)}


@router.get("/v1/alerts/events")
async def alert_events(request: Request, after: str = Query("0", max_length=64),
                       timeout: float = Query(3600.0, gt=0, le=3600.0)) -> StreamingResponse:
    """Server-sent events: one ``alert`` event per alert with an id over ``after`` (or the
    ``Last-Event-ID`` a reconnecting client sends), as they are stored, until ``timeout``
    seconds have passed (or 15 minutes without an alert); a ``ping`` comment every 15 s
    keeps proxies from closing it. Held by the event loop, not a thread (alert_stream.py);
    at most CHORD_API_MAX_STREAMS per key (429)."""
    from chord_core.service import alert_stream

    last_id = request.headers.get("last-event-id", "")
    start = alert_stream.alert_id("Last-Event-ID", last_id) if last_id.strip() else \
        alert_stream.alert_id("after", after)
    index = library_index(request)
    slot = alert_stream.take(request)
    ring = await alert_stream.bell(request, index)
    return StreamingResponse(alert_stream.events(request, index, start, timeout, ring, slot),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
