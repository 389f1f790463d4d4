"""The library over HTTP: ``GET /v1/search``, a hit's thumbnail, and the alerts.

    GET /v1/search?q=…&folder=…&date_from=YYYY-MM-DD&date_to=…&task=…&limit=20
        → chord.library-search/v1 (hits ranked by bm25; see chord_core/library/search.py)
    GET /v1/library/thumbnail?source=<job or run id>&t=<seconds>   → image/jpeg
    GET /v1/alerts                  the newest alerts of the watch folders' standing checks
    GET /v1/alerts/events?after=ID  the alerts as server-sent events, as they are stored

Behind the API key like every route but /health (the router is included with it). ``q`` is
at most 200 characters and ``limit`` 1–100 (a 400 with a hint otherwise). The thumbnail
names a job, never a path: only clips the store says were analysed are read, and only under
the media roots, checked where the file is opened (a clip swapped for a link is refused).
"""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator

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
    from chord_core.library.search import Filters, search

    index = library_index(request)
    filters = Filters(folder=folder, date_from=date_from, date_to=date_to, task=task)
    return await run_in_threadpool(search, index, q, filters=filters, limit=limit)


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


# Alerts another process stores (a `watch` command on the same store) wake a stream through
# its signal file (library/alert_signal.py); the table is re-read this often only when
# file events are not available, and every ALERT_FALLBACK_S regardless (a lost event).
ALERT_RECHECK_S = 1.0
ALERT_FALLBACK_S = 15.0
DISCONNECT_CHECK_S = 2.0


@router.get("/v1/alerts")
async def alerts(request: Request, limit: int = Query(50, ge=1, le=500)) -> Any:
    """The newest alerts of the watch folders' standing checks, newest first."""
    from chord_core.library.alerts import latest_alerts

    index = library_index(request)
    return {"alerts": await run_in_threadpool(latest_alerts, index, limit)}


@router.get("/v1/alerts/events")
async def alert_events(request: Request, after: int = Query(0, ge=0),
                       timeout: float = Query(3600.0, gt=0, le=3600.0)) -> StreamingResponse:
    """Server-sent events: one ``alert`` event per alert with an id over ``after`` (or the
    ``Last-Event-ID`` a reconnecting client sends), as they are stored, until ``timeout``
    seconds have passed; a ``ping`` comment every 15 s keeps proxies from closing it."""
    index = library_index(request)
    last_id = request.headers.get("last-event-id", "")
    start = int(last_id) if last_id.isdigit() else after
    return StreamingResponse(_alert_stream(request, index, start, timeout),
                             media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


async def _alert_stream(request: Request, index: Any, start: int,
                        timeout: float) -> AsyncIterator[str]:
    """The events of ``alert_events``. The table is read when a signal says an alert was
    stored (by any process on the store) or every ``recheck`` seconds; between reads the
    stream sleeps on the signal, waking every DISCONNECT_CHECK_S only to see whether the
    client left (a thread of the pool is held while it sleeps)."""
    from chord_core.library.alerts import (alerts_stored, list_alerts, listen_for_alerts,
                                           wait_for_alert)

    now = time.monotonic()
    deadline, ping = now + timeout, now + 15.0
    seen = alerts_stored()
    live = await run_in_threadpool(listen_for_alerts, index)
    recheck = ALERT_FALLBACK_S if live else ALERT_RECHECK_S
    read_at, signalled = now, True
    while time.monotonic() < deadline and not await request.is_disconnected():
        if signalled or time.monotonic() >= read_at:
            read_at = time.monotonic() + recheck
            for alert in await run_in_threadpool(list_alerts, index, after_id=start):
                start = int(alert["id"])
                yield f"id: {start}\nevent: alert\ndata: {json.dumps(alert)}\n\n"
        if time.monotonic() > ping:
            ping = time.monotonic() + 15.0
            yield ": ping\n\n"
        wait = min(DISCONNECT_CHECK_S, read_at - time.monotonic(), deadline - time.monotonic())
        cursor = await run_in_threadpool(wait_for_alert, seen, max(0.0, wait))
        signalled, seen = cursor > seen, cursor
    yield "event: end\ndata: {}\n\n"
