"""Errors as the service sends them: JSON ``{"error": …, "hint": …}`` with a fitting status.

Chord's own errors carry a message and a hint already; this maps their class to an HTTP
status (bad input 4xx, capacity 503, a group whose children failed 424) by ``isinstance`` in
``STATUS_BY_CLASS`` (most specific first), and turns everything unexpected (``InternalError``,
any other exception) into a generic 500 whose traceback goes to the log only. A job's stored
error (``ChordError.to_dict``) is rebuilt as its class (``errors.from_record``) and mapped by
the same table; a record that is not one of ``chord_core.errors``' classes is a bug (500).
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from chord_core import errors as E
from chord_core.service.runtime import ClientGone

log = logging.getLogger(__name__)

# (class, status), most specific first: the first ``isinstance`` match is the status; a
# ChordError none of these is (a bug's own subclass) is a 500
STATUS_BY_CLASS: tuple[tuple[type[E.ChordError], int], ...] = (
    (E.VideoError, 422), (E.ModelNotFoundError, 404), (E.ConfigError, 400),
    (E.OutputError, 400), (E.InputError, 400), (E.JobCancelled, 409),
    (E.BatchStopped, 409), (E.AlreadyRunning, 409), (E.PlacementError, 503), (E.ModelError, 503),
    (E.ResourceError, 503), (E.StoreError, 503), (E.WorkerCrashed, 503),
    (E.ResumeError, 503), (E.DiskFullError, 507), (E.GroupFailed, 424),
    (E.RemoteError, 502), (E.InternalError, 500),
)
FULL_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# a 500 ends its connection, said so: Starlette re-raises after a 500 and uvicorn then closes
# the socket, so a pooled client whose next request went out on it saw ECONNRESET (issue 25)
CLOSE = {"Connection": "close"}
GENERIC_500 = {"error": "internal error in the Chord service",
               "hint": "this is a bug in Chord; the server log has the details — please "
                       "report it"}
_HTTP_HINTS = {
    400: "check the request body's format; GET /openapi.json shows what each endpoint "
         "takes",
    401: "send 'Authorization: Bearer <key>' with the key the service was started with "
         "(CHORD_API_KEY)",
    403: "call the service by the address it was started for, from a program (not a web page)",
    404: "check the URL; GET /openapi.json lists the endpoints",
    405: "check the method; GET /openapi.json lists the endpoints",
    413: "send less: fewer or smaller files per request (the limit is set by "
         "CHORD_API_MAX_BODY_MB)",
    415: "send Content-Type: application/json, or multipart/form-data where a file is "
         "uploaded",
}


class ApiError(Exception):
    """An error the service answers with: status, message and what to do about it."""

    def __init__(self, status: int, message: str, hint: str = "",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.hint, self.headers = status, message, hint, headers

    def response(self, request: Request | None = None) -> JSONResponse:
        return error_response(request, self.status, self.message, self.hint, self.headers)


OPENAI_PATHS = ("/v1/chat/",)
_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                 404: "not_found_error", 413: "invalid_request_error", 507: "server_error",
                 422: "invalid_request_error", 503: "server_error", 500: "server_error"}


def error_response(request: Request | None, status: int, message: str, hint: str = "",
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """``{"error", "hint"}``; on OpenAI-style paths ``error`` is OpenAI's object
    (``message``, ``type``, ``code``) so its clients show the message, ``hint`` beside it."""
    path = request.url.path if request is not None else ""
    return JSONResponse(error_body(path, status, message, hint), status, headers=headers)


def error_body(path: str, status: int, message: str, hint: str) -> dict[str, Any]:
    """The error document for ``path``: OpenAI's object on its paths, else ours."""
    body: dict[str, Any] = {"error": message, "hint": hint}
    if path.startswith(OPENAI_PATHS):
        body["error"] = {"message": f"{message} (hint: {hint})" if hint else message,
                         "type": _OPENAI_TYPES.get(status, "invalid_request_error"),
                         "param": None, "code": status}
    return body


def status_for(error: BaseException | dict[str, Any] | None) -> int:
    """HTTP status for a Chord error, raised or stored (its dict): by class, most specific
    first; 500 for anything else (a bug)."""
    if not isinstance(error, BaseException):
        error = E.from_record(error)
    return 500 if error is None else E.by_class(STATUS_BY_CLASS, error, 500)


def from_job_error(error: dict[str, Any] | None) -> ApiError:
    """The ApiError for a failed job's stored error; internal errors stay generic."""
    error = error or {}
    status = status_for(error)
    if status == 500:
        return ApiError(500, GENERIC_500["error"], GENERIC_500["hint"])
    return ApiError(status, str(error.get("message", "the job failed")),
                    str(error.get("hint", "")))


def from_chord_error(exc: E.ChordError) -> ApiError:
    """The ApiError for a raised Chord error, by its class (a bug's stays generic)."""
    status = status_for(exc)
    if status == 500:
        return ApiError(500, GENERIC_500["error"], GENERIC_500["hint"])
    return ApiError(status, exc.message, exc.hint)


def job_error_entry(error: dict[str, Any] | None) -> dict[str, str]:
    """A failed job's error as a per-item ``{"error", "hint"}`` (generic for bugs)."""
    api = from_job_error(error)
    return {"error": api.message, "hint": api.hint}


def invalid_body(exc: Any, hint: str) -> ApiError:
    """A 422 for a body that failed its pydantic model: where (the first error's field path)
    and what, with the caller's ``hint`` naming the fields it takes."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return ApiError(422, f"{where}: {first.get('msg')}", hint)


def job_error_view(error: dict[str, Any] | None) -> dict[str, Any]:
    """A failed job's error in its status view: the entry plus the HTTP ``status`` its class
    maps to, so a client (the CLI) tells bad input (4xx, exit 2) from a fault."""
    return {**job_error_entry(error), "status": from_job_error(error).status}


def _validation_message(exc: RequestValidationError) -> tuple[int, str, str]:
    errs = exc.errors()
    first = errs[0] if errs else {}
    if first.get("type") == "json_invalid":
        return 400, "the request body is not valid JSON", \
            "send a JSON object with Content-Type: application/json"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    more = f" (and {len(errs) - 1} more problem(s))" if len(errs) > 1 else ""
    return 422, f"{where}: {first.get('msg', 'invalid value')}{more}", \
        "see GET /openapi.json for the expected fields"


def install_handlers(app: FastAPI) -> None:
    """Every error leaves as ``{"error", "hint"}``; no traceback ever reaches a client."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response(request)

    @app.exception_handler(E.ChordError)
    async def _chord(request: Request, exc: E.ChordError) -> JSONResponse:
        api = from_chord_error(exc)
        if api.status >= 500:
            log.error("request failed: %s", exc)
        return api.response(request)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(request, *_validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 413:
            message = "the request body is too large"
        return error_response(request, exc.status_code, message,
                              _HTTP_HINTS.get(exc.status_code, "see GET /openapi.json"),
                              getattr(exc, "headers", None))

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, exc: ClientGone) -> Response:
        log.info("%s", exc)
        return Response(status_code=499)  # nginx's "client closed request": no one reads it

    @app.exception_handler(ClientDisconnect)
    async def _hung_up(_: Request, exc: ClientDisconnect) -> Response:
        return Response(status_code=499)  # it left (or was timed out) while sending its body

    @app.exception_handler(OSError)
    async def _os(request: Request, exc: OSError) -> JSONResponse:
        if exc.errno in FULL_DISK_ERRNOS:
            full = disk_full(exc)
            log.error("request refused: %s", full.message)
            return from_chord_error(full).response(request)
        return await _bug(request, exc)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(request, 500, GENERIC_500["error"], GENERIC_500["hint"], CLOSE)


def disk_full(exc: OSError) -> E.DiskFullError:
    """The DiskFullError for an OSError that says the disk (or quota, or file-size limit)
    is full: what a client is told, without the server's paths."""
    return E.DiskFullError("the server's disk is full: the request's files could not be "
                           f"stored ({exc.strerror or 'no space left'})",
                           hint="send it again later; the server's operator must free space "
                                "where CHORD_DATA_DIR lies (old uploads go after "
                                "CHORD_API_UPLOAD_RETENTION_H hours)")
