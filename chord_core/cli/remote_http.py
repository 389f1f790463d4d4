"""The CLI's HTTP to a Chord service, read as an attacker's or a stranger's answers could be.

``--server`` may name anything, and whatever answers is checked before it is believed:
every reply is read bounded (MAX_REPLY_BYTES; a result MAX_RESULT_BYTES; an event line
MAX_LINE_BYTES), must be JSON where JSON is due (an HTML page is not), a submitted job's id
must look like a Chord job id (letters, digits, ``-`` and ``_``: never ``../``), a redirect
is refused (Chord never redirects, and urllib would carry the key along), and a job's event
stream is waited for CHORD_REMOTE_WAIT_S in all, however much or little it sends, and any
other reply must arrive whole within CHORD_REMOTE_REPLY_S of its request being sent (a reply
trickled a byte, or a header line, at a time held the CLI: each byte reset the socket's
30 s timeout). Each of these is one ChordError that says the server does not answer as
Chord does.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Iterator
from urllib.parse import urlsplit

from chord_core.errors import ChordError, RemoteError

MAX_REPLY_BYTES = 1 << 20
MAX_RESULT_BYTES = 256 << 20
MAX_LINE_BYTES = 1 << 20
DEFAULT_WAIT_S = 3660.0  # the service ends a job's stream after an hour (EVENTS_MAX_S)
DEFAULT_REPLY_S = 120.0  # a reply (not a stream) arrives whole within this, once asked
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
NOT_CHORD_HINT = ("check that --server (or CHORD_SERVER) names a Chord service "
                  "(python -m chord_core serve), or run here with --local")


def not_chord(url: str, what: str) -> ChordError:
    return ChordError(f"the server at {base_of(url)} does not answer as a Chord service: "
                      f"{what}", hint=NOT_CHORD_HINT)


def base_of(url: str) -> str:
    return url.split("/v1/", 1)[0].split("/health", 1)[0][:200]


def _seconds(name: str, default: float) -> float:
    from chord_core.config import env_value
    from chord_core.errors import ConfigError

    raw = env_value(name)
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not 0 < value <= 7 * 86400:
        raise ConfigError(f"{name}={raw!r} is not a number of seconds",
                          hint=f"give seconds between 1 and 604800, e.g. {default:.0f}")
    return value


def wait_s() -> float:
    """CHORD_REMOTE_WAIT_S: the longest a job's event stream is followed, in all."""
    return _seconds("CHORD_REMOTE_WAIT_S", DEFAULT_WAIT_S)


def reply_s() -> float:
    """CHORD_REMOTE_REPLY_S: the longest one reply (its headers and body) may take to
    arrive, from the moment its request was sent."""
    return _seconds("CHORD_REMOTE_REPLY_S", DEFAULT_REPLY_S)


class _Deadline:
    """Shuts a socket once ``seconds`` are up (the blocked read then ends); ``fired`` says
    it did, so the error can name the time instead of a broken connection."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.seconds, self.fired = seconds, False
        self._timer = threading.Timer(seconds, self._fire, args=(sock,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, sock: socket.socket) -> None:
        self.fired = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def cancel(self) -> None:
        self._timer.cancel()


class _TimedResponse(http.client.HTTPResponse):
    """A reply that stops its deadline's timer when it is closed (read in time)."""

    deadline: _Deadline | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.deadline is not None:
                self.deadline.cancel()


class _HTTP(http.client.HTTPConnection):
    """An HTTP connection whose reply must arrive whole within ``reply_s()`` of the
    request being sent (the upload itself is not counted)."""

    response_class: type[http.client.HTTPResponse] = _TimedResponse

    def getresponse(self) -> http.client.HTTPResponse:
        deadline = _Deadline(self.sock, reply_s())
        try:
            resp = super().getresponse()
        except BaseException:
            deadline.cancel()
            if deadline.fired:
                raise _TooSlow(deadline.seconds) from None
            raise
        if isinstance(resp, _TimedResponse):
            resp.deadline = deadline
        return resp


class _TooSlow(OSError):
    """The reply's headers did not arrive in time (``call`` makes it a ChordError)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"its reply did not arrive whole within {seconds:.0f} s "
                         "(CHORD_REMOTE_REPLY_S)")
        self.seconds = seconds


class _HTTPS(_HTTP, http.client.HTTPSConnection):
    """The same for HTTPS."""


class _Handler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_HTTP, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> Any:
        return self.do_open(_HTTPS, req, context=getattr(self, "_context", None))


def _too_slow(resp: Any) -> float | None:
    """The reply's deadline in seconds if it was cut for taking longer, else None."""
    deadline = getattr(resp, "deadline", None)
    return deadline.seconds if deadline is not None and deadline.fired else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx comes back as an HTTPError (see _remote_error)


_OPENER = urllib.request.build_opener(_NoRedirect, _Handler, _HTTPSHandler)


def headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    from chord_core.config import env_value

    key = env_value("CHORD_API_KEY")
    head = {"Accept": "application/json", **(extra or {})}
    if key:
        head["Authorization"] = f"Bearer {key}"
    return head


def call(url: str, *, data: Any = None, headers_: dict[str, str] | None = None,
         method: str | None = None, timeout: float = 30.0, **kw: Any) -> Any:
    """The response of one request with the key (redirects refused); raises ChordError."""
    extra = kw.pop("headers", None) or headers_
    req = urllib.request.Request(url, data=data, headers=headers(extra), method=method)
    try:
        return _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise _remote_error(exc, url) from None
    except (OSError, http.client.HTTPException) as exc:
        if isinstance(exc, _TooSlow):  # raised by getresponse, which urllib does not wrap
            raise not_chord(url, str(exc)) from None
        raise ChordError(f"the Chord service at {base_of(url)} cannot be reached: {exc}",
                         hint="start it (python -m chord_core serve), name another with "
                              "--server, or run here with --local") from None


def _remote_error(exc: urllib.error.HTTPError, url: str) -> ChordError:
    if 300 <= exc.code < 400:
        where = str(exc.headers.get("Location", "?"))[:200]
        return not_chord(url, f"it redirected ({exc.code}) to {where}")
    try:
        body = json.loads(exc.read(MAX_REPLY_BYTES) or b"{}")
    except (ValueError, OSError):
        body = None
    if not isinstance(body, dict) or "error" not in body:
        return RemoteError(exc.code, f"the server at {base_of(url)} answered {exc.code} "
                                     "without a Chord error", NOT_CHORD_HINT)
    err = body.get("error")
    if isinstance(err, dict):  # OpenAI-style paths
        err = err.get("message")
    return RemoteError(exc.code, str(err or f"the service answered {exc.code}")[:2000],
                       str(body.get("hint", ""))[:2000])


def read_json(resp: Any, url: str, what: str, limit: int = MAX_REPLY_BYTES) -> dict[str, Any]:
    """The reply as a JSON object, read at most ``limit`` bytes; ChordError otherwise."""
    kind = str(resp.headers.get("Content-Type", "")).lower()
    broke: Exception | None = None
    try:
        raw = resp.read(limit + 1)
    except (OSError, http.client.HTTPException) as exc:
        raw, broke = b"", exc
    slow = _too_slow(resp)
    if slow is not None:
        raise not_chord(url, f"its reply did not arrive whole within {slow:.0f} s "
                             "(CHORD_REMOTE_REPLY_S)")
    if broke is not None:
        raise not_chord(url, f"{what} broke off ({broke})")
    if len(raw) > limit:
        raise not_chord(url, f"{what} is over {limit:,} bytes")
    if "json" not in kind:
        raise not_chord(url, f"{what} is {kind.split(';')[0] or 'untyped'}, not JSON")
    try:
        doc = json.loads(raw)
    except ValueError:
        raise not_chord(url, f"{what} is not valid JSON") from None
    if not isinstance(doc, dict):
        raise not_chord(url, f"{what} is not a JSON object")
    return doc


def job_id_of(resp: Any, url: str) -> str:
    """The ``job_id`` of a submit's reply, checked to be a Chord job id."""
    doc = read_json(resp, url, "its answer to POST /v1/jobs")
    job_id = doc.get("job_id")
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        shown = "none" if job_id is None else repr(str(job_id)[:60])
        raise not_chord(url, f"its answer to POST /v1/jobs holds no Chord job id ({shown})")
    return job_id


def health(url: str) -> dict[str, Any] | None:
    """The service's /health document (ready or loading), or None if it does not answer."""
    req = urllib.request.Request(url + "/health", headers={"Accept": "application/json"})
    try:
        with _OPENER.open(req, timeout=2) as resp:
            doc = json.loads(resp.read(MAX_REPLY_BYTES))
    except urllib.error.HTTPError as exc:  # 503: loading or failed — it is there
        try:
            doc = json.loads(exc.read(MAX_REPLY_BYTES))
        except (ValueError, OSError):
            return None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return doc if isinstance(doc, dict) else None


def events(url: str, job_id: str) -> Iterator[tuple[str, Any]]:
    """The job's server-sent events as (event, data) until the stream ends, for at most
    ``wait_s()`` seconds in all (the socket is shut when they are up)."""
    limit = wait_s()
    parts = urlsplit(url)
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" else \
        http.client.HTTPConnection
    conn = conn_type(parts.hostname or "127.0.0.1", parts.port, timeout=limit)
    path = f"{parts.path.rstrip('/')}/v1/jobs/{job_id}/events"
    started = time.monotonic()
    try:
        conn.request("GET", path, headers=headers({"Accept": "text/event-stream"}))
        resp = conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise ChordError(f"the Chord service at {base_of(url)} cannot be reached: {exc}",
                         hint="start it again, or run here with --local") from None
    timer = threading.Timer(max(0.0, limit - (time.monotonic() - started)),
                            _shut, args=(conn,))
    timer.daemon = True
    timer.start()
    try:
        yield from _read_events(resp, url, limit, started)
    finally:
        timer.cancel()
        conn.close()


def _shut(conn: http.client.HTTPConnection) -> None:
    try:
        if conn.sock is not None:
            conn.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _read_events(resp: Any, url: str, limit: float,
                 started: float) -> Iterator[tuple[str, Any]]:
    if resp.status != 200:
        raise _remote_error(urllib.error.HTTPError(url, resp.status, resp.reason,
                                                   resp.headers, resp), url)
    kind = str(resp.headers.get("Content-Type", "")).lower()
    if not kind.startswith("text/event-stream"):
        raise not_chord(url, f"its job events are {kind.split(';')[0] or 'untyped'}, "
                             "not an event stream")
    event = "message"
    while True:
        try:
            raw = resp.readline(MAX_LINE_BYTES + 1)
        except (OSError, http.client.HTTPException):
            raw = b""
        if time.monotonic() - started >= limit:
            raise ChordError(f"the job's events did not end within {limit:.0f} s "
                             f"(CHORD_REMOTE_WAIT_S) at {base_of(url)}",
                             hint="the job may still run there: follow it with GET "
                                  "/v1/jobs/<id>, or raise CHORD_REMOTE_WAIT_S")
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            raise not_chord(url, f"an event line is over {MAX_LINE_BYTES:,} bytes")
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line.startswith("event:"):
            event = line[6:].strip()[:64]
        elif line.startswith("data:"):
            try:
                data = json.loads(line[5:])
            except ValueError:
                raise not_chord(url, "an event's data is not JSON") from None
            yield event, data
            event = "message"
