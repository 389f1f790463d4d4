"""``GET /health``: whether the service can answer, and what each worker is doing.

* 200 ``ready`` once a worker has the served model loaded (a worker warming up in the
  background says so in ``warm_up``: requests still run, a shape not yet captured is
  captured on the request that needs it);
* 503 ``loading`` while workers start, with each one's step in hand (``warming``: imports,
  weights, warm-up, decode graphs — done/total and the seconds left when the last start on
  this machine says how long it took) and ``Retry-After``;
* 503 ``failed`` when no worker can run the served model: the loader's error and hint.

A worker whose start-up model failed to load stays up (it can run jobs naming another
model), but it is not ready for this service's model: it shows as ``failed`` with the error.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool


def worker_view(row: dict[str, Any]) -> dict[str, Any]:
    """One ``JobManager.workers()`` row as ``/health`` shows it."""
    state = row["state"]
    error = row.get("error") or None
    if state == "ready" and error and not row.get("model_loaded", True):
        state = "failed"  # up, but the served model could not be loaded on it
    view: dict[str, Any] = {"worker": row["worker"], "state": state,
                            "devices": row["devices"], "startup": row.get("startup"),
                            "busy_s": round(row.get("busy_s", 0.0), 3),
                            "tasks_done": row.get("tasks_done", 0)}
    if state == "failed" and error:
        view["error"] = error.get("message", "the model could not be loaded")
        view["hint"] = error.get("hint", "see the server log")
    if row.get("warming"):
        view["warming"] = row["warming"]
    cache = compile_cache(row.get("startup") or {})
    if cache is not None:
        view["compile_cache"] = cache
    return view


def compile_cache(startup: dict[str, Any]) -> dict[str, int] | None:
    """Compile-cache hits and misses of a worker's warm-up (FX graphs and AOT graphs
    together): a warm start shows hits and no misses. None when nothing was compiled."""
    keys = ("fx_cache_hits", "fx_cache_misses", "aot_cache_hits", "aot_cache_misses")
    if not any(f"warmup_{k}" in startup for k in keys):
        return None
    got = {k: int(startup.get(f"warmup_{k}") or 0) for k in keys}
    return {"hits": got["fx_cache_hits"] + got["aot_cache_hits"],
            "misses": got["fx_cache_misses"] + got["aot_cache_misses"],
            "compiled_graphs": int(startup.get("warmup_compiled_graphs") or 0)}


def _stage(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """What the starting workers are doing, for the 503 body: the slowest one's step."""
    steps = [w["warming"] for w in workers if w.get("warming")]
    if not steps:
        return {}
    known = [s["left_s"] for s in steps if s.get("left_s") is not None]
    slow = max(steps, key=lambda s: s.get("left_s") or 0.0)
    return {"stage": slow.get("detail") or slow.get("step", ""),
            "left_s": round(max(known), 1) if known else None}


async def health(request: Request) -> JSONResponse:
    """200 when a worker is ready for the served model; 503 loading (with what the workers
    are doing) or failed (with the loader's error) before that."""
    rt = request.app.state.runtime
    rows = await run_in_threadpool(rt.manager.workers)  # it takes the manager's lock
    workers = [worker_view(r) for r in rows]
    body: dict[str, Any] = {"model": rt.model, "workers": workers,
                            "uptime_s": round(time.time() - rt.started_at, 1)}
    from chord_core.service.streams_routes import health_lines

    body["streams"] = health_lines(request.app)  # live streams: state, masked URL
    ready = sum(w["state"] == "ready" for w in workers)
    if ready:
        background = [w["warming"] for w in workers if w.get("warming")]
        if background:
            body["warm_up"] = _stage(workers)
        return JSONResponse({"status": "ready", **body})
    if workers and all(w["state"] == "failed" for w in workers):
        first = next((w for w in workers if w.get("error")), None)
        if first is None:  # died on start (no loader error): the manager's summary
            err = (await run_in_threadpool(rt.manager.model_state)).get("error") or {}
            first = {"error": err.get("message", "workers failed"),
                     "hint": err.get("hint", "see the server log")}
        return JSONResponse({"status": "failed", "error": first["error"],
                             "hint": first["hint"], **body}, 503)
    stage = _stage(workers)
    retry = max(1, min(30, int(stage.get("left_s") or 5)))
    return JSONResponse({"status": "loading", "error": "the model is still loading",
                         "hint": f"retry in {retry} s", "progress": f"{ready}/{len(workers)}"
                         " workers ready", **stage, **body}, 503,
                        headers={"Retry-After": str(retry)})
