"""The FastAPI application: ``create_app(runtime, settings)``.

Layers, outermost first: uvicorn's protocol (``protocol.py``: header size and count, read
timeouts), the guard (a DNS-rebinding or cross-site page is refused with 403; a missing or
wrong key with 401, before any byte of the body is read and before routing, so a wrong
method or path says 401 too; a Content-Length over the limit with 413), Starlette's
request-body limit (counted while the body is read, for bodies sent without a length: 413),
the error handlers (every error is ``{"error", "hint"}``), then the routes. Every route but
``/health`` needs the API key when one is configured, ``/openapi.json`` included.

Measured before the key moved into the guard (issue 25): 100 MiB of JSON to
``/v1/chat/completions`` without a key got its 401 after 5.25 s, the service's RSS went
150 → 838 MiB and ``/health`` stalled 4.75 s, because FastAPI read and parsed the body to
fill the route's arguments before the key dependency ran.
"""

from __future__ import annotations

import hmac
import json
from typing import Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, Request
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from chord_core.service.http_errors import ApiError, install_handlers
from chord_core.service.protocol import HEADERS_HINT, MAX_HEADER_BYTES, MAX_HEADERS
from chord_core.service.settings import ServiceSettings


def _host_only(value: str) -> str:
    """``example.com:8080`` → ``example.com``; ``[::1]:8080`` → ``::1``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


# load balancers and probes call /health without a key; the CLI checks /v1/identity before
# it sends one (service/identity.py)
OPEN_PATHS = frozenset({"/health", "/v1/identity"})


class RequestGuard:
    """Refuse, before anything is read, requests whose Host (or Origin, when a browser
    sends one) is not allowed, that lack the key (when one is set), and bodies whose
    Content-Length is over the limit. Bodies without a length are counted as they arrive
    by Starlette's body limit."""

    def __init__(self, app: ASGIApp, allowed: list[str], max_body: int, api_key: str = ""
                 ) -> None:
        self.app, self.allowed, self.max_body = app, {h.lower() for h in allowed}, max_body
        self.api_key = api_key.encode()

    def _ok(self, host: str) -> bool:
        return "*" in self.allowed or _host_only(host) in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        origin = headers.get("origin", "")
        bad_origin = bool(origin) and (origin == "null" or not self._ok(urlsplit(origin).netloc))
        if bad_origin or not self._ok(headers.get("host", "")):
            return await _refuse(send, 403, "this host or origin may not call the Chord service",
                                 "call it by the address it was started for, from a program "
                                 "(not a web page); CHORD_ALLOWED_HOSTS adds host names")
        raw_headers = scope.get("headers", ())
        size = sum(len(k) + len(v) + 4 for k, v in raw_headers)
        if len(raw_headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
            # h11 bounds a header block that arrives in pieces; one that came whole is
            # measured here
            return await _refuse(send, 431, f"the request headers are too large "
                                            f"({len(raw_headers)} fields, {size:,} bytes)",
                                 HEADERS_HINT)
        if self.api_key and scope["path"] not in OPEN_PATHS and \
                not key_matches(headers.get("authorization", ""), self.api_key):
            return await _refuse(send, 401, "missing or wrong API key", KEY_HINT,
                                 scope["path"], [(b"www-authenticate", b"Bearer")])
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body:
            return await _refuse(send, 413, f"the request body is too large ({int(length):,} "
                                            f"bytes; the limit is {self.max_body:,})",
                                 "send less per request: fewer or smaller files (the limit is "
                                 "set by CHORD_API_MAX_BODY_MB)")
        return await self.app(scope, receive, send)


KEY_HINT = ("send 'Authorization: Bearer <key>' with the key the service was started with "
            "(CHORD_API_KEY or CHORD_API_KEY_FILE)")


def key_matches(authorization: str, key: bytes) -> bool:
    """``Bearer <key>``, compared in constant time."""
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("latin-1", "replace"), key)


async def _refuse(send: Any, status: int, message: str, hint: str, path: str = "",
                  extra: list[tuple[bytes, bytes]] | None = None) -> None:
    """Answer ``{"error", "hint"}`` straight from the ASGI layer (OpenAI's error object on
    its paths), and close the connection: the body was not read, so the socket cannot
    carry another request."""
    from chord_core.service.http_errors import error_body

    body = json.dumps(error_body(path, status, message, hint)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *(extra or [])]})
    await send({"type": "http.response.body", "body": body})


def require_key(request: Request) -> None:
    """The API key check (Bearer), when the service has one. The guard has done it before
    the body was read; this stays for routes mounted without the guard."""
    settings: ServiceSettings = request.app.state.settings
    if settings.auth_required and not key_matches(request.headers.get("authorization", ""),
                                                  settings.api_key.encode()):
        raise ApiError(401, "missing or wrong API key", KEY_HINT, {"WWW-Authenticate": "Bearer"})


def create_app(runtime: Any, settings: ServiceSettings, readers: Any = None) -> FastAPI:
    """The service app over ``runtime`` (a ``ServiceRuntime``: manager + store); request
    bodies are read by ``readers`` (a started ``Readers``; None: this process's threads)."""
    from chord_core.service import (chat, health, identity, jobs_routes, library_routes, ofa,
                                    review_routes, streams_routes)
    from chord_core.service.readers import Readers

    app = FastAPI(title="Chord service", version="1",
                  description="Video understanding on Qwen2.5-VL: jobs, OFA-VE batch "
                              "entailment, OpenAI-compatible chat completions.",
                  # the interactive pages load their scripts from a CDN: nothing leaves the
                  # machine, so only the schema is served
                  docs_url=None, redoc_url=None)
    app.state.runtime, app.state.settings = runtime, settings
    app.state.readers = readers if readers is not None else Readers(0)
    install_handlers(app)
    app.add_api_route("/health", health.health, methods=["GET"])
    app.add_api_route("/v1/identity", identity.identity, methods=["GET"])
    guarded = [Depends(require_key)]
    for router in (jobs_routes.router, ofa.router, chat.router, library_routes.router,
                   review_routes.router, streams_routes.router):
        app.include_router(router, dependencies=guarded)
    streams_routes.start_env_streams(app)  # CHORD_WATCH's live streams, if it names any
    # counts the body as it arrives (chunked uploads too); inside the guard, which has
    # already answered a too-large Content-Length with JSON
    app.add_middleware(RequestBodyLimitMiddleware, max_body_size=settings.max_body_bytes)
    app.add_middleware(RequestGuard, allowed=settings.host_allowlist(),
                       max_body=settings.max_body_bytes,
                       api_key=settings.api_key if settings.auth_required else "")
    return app
