"""Live streams over HTTP (behind the API key like every route but /health):

    POST   /v1/streams        {"url": "rtsp://…", "chunk_s": 10, "statements": ["…"],
                               "threshold": 0.8, "target": "", "prompt": "", "describe": true}
           → 201 the stream: id, masked URL (``shown``), state, last error, recent chunks
    GET    /v1/streams        → {"streams": [...]}, stopped ones too (their results stay)
    GET    /v1/streams/{id}   → the stream with its recent chunks (segment, jobs, alerts)
    DELETE /v1/streams/{id}   → stops it: recordings, results and alerts are kept

A stream's credentials are never returned, stored or logged: every answer carries the
masked URL. The streams of the process (``CHORD_WATCH`` entries that are streams too) run on
the service's own job manager, beside every other job.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from chord_core.service.http_errors import ApiError

log = logging.getLogger(__name__)
router = APIRouter()
_lock = threading.Lock()


class StreamBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=4096)
    chunk_s: float | None = Field(None, ge=1.0, le=600.0)
    statements: list[str] = Field(default_factory=list, max_length=16)
    threshold: float | None = Field(None, ge=0.0, le=1.0)
    target: str = Field("", max_length=200)
    prompt: str = Field("", max_length=2000)
    describe: bool = True


def stream_hub(app: Any) -> Any:
    """The service's ``StreamHub`` (made on first use, over its manager and store)."""
    from chord_core.config import default_data_dir
    from chord_core.streams.hub import StreamHub

    with _lock:
        hub = getattr(app.state, "streams", None)
        if hub is None:
            rt = app.state.runtime
            hub = app.state.streams = StreamHub(rt.manager, rt.store, default_data_dir())
        return hub


def start_env_streams(app: Any) -> int:
    """Start the streams ``CHORD_WATCH`` names (when it names any); how many."""
    from chord_core.config import env_value
    from chord_core.streams.background import streams_from_env

    if not env_value("CHORD_WATCH"):
        return 0
    named = streams_from_env(getattr(app.state.runtime, "model", None))
    for url, settings in named:
        stream_hub(app).start(url, settings)
    return len(named)


def health_lines(app: Any) -> list[dict[str, Any]]:
    """The streams' states for ``/health`` ([] when none was started)."""
    hub = getattr(app.state, "streams", None)
    return hub.health() if hub is not None else []


@router.post("/v1/streams", status_code=201)
async def start_stream(request: Request, body: StreamBody) -> JSONResponse:
    from chord_core.streams.background import live_settings

    rt = request.app.state.runtime
    settings = live_settings(
        getattr(rt, "model", None), chunk_s=body.chunk_s, threshold=body.threshold,
        statements=tuple(s for s in body.statements) or None, target=body.target,
        prompt=body.prompt, describe=body.describe)  # the hook: CHORD_WATCH_HOOK only
    hub = stream_hub(request.app)
    row = await run_in_threadpool(hub.start, body.url, settings)
    return JSONResponse(row, status_code=201)


@router.get("/v1/streams")
async def list_streams(request: Request) -> dict[str, Any]:
    hub = stream_hub(request.app)
    return {"streams": await run_in_threadpool(hub.list_streams)}


@router.get("/v1/streams/{stream_id}")
async def get_stream(request: Request, stream_id: str) -> dict[str, Any]:
    hub = stream_hub(request.app)
    _check_id(stream_id)
    if await run_in_threadpool(hub.table.stream, stream_id) is None:
        raise ApiError(404, f"no stream {stream_id!r}", "list them: GET /v1/streams")
    return await run_in_threadpool(hub.describe, stream_id)


@router.delete("/v1/streams/{stream_id}")
async def stop_stream(request: Request, stream_id: str) -> dict[str, Any]:
    hub = stream_hub(request.app)
    _check_id(stream_id)
    if await run_in_threadpool(hub.table.stream, stream_id) is None:
        raise ApiError(404, f"no stream {stream_id!r}", "list them: GET /v1/streams")
    return await run_in_threadpool(hub.stop, stream_id)


def _check_id(stream_id: str) -> None:
    import re

    if not re.fullmatch(r"live-[0-9a-f]{10}", stream_id):
        raise ApiError(404, "no such stream", "stream ids look like live-0123456789")
