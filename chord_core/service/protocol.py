"""uvicorn's h11 protocol with the limits a public socket needs: header size and count, and
read timeouts for slow clients, answered as ``{"error", "hint"}`` JSON.

Measured before (issue 25, uvicorn's default httptools parser): a 64 MiB header got 200
(+125 MiB RSS), a 160 MiB one 200 after 29.9 s (+316 MiB); 50 sockets that sent nothing
(or half a header) were all still open after 60 s — uvicorn times out only idle keep-alive
connections, not a request being read. Here:

- the header block may be ``MAX_HEADER_BYTES`` (h11's incomplete-event limit: it never
  buffers more); more is a 431 (the guard in ``app.py`` bounds the count of fields);
- a client has ``read_timeout_s`` from connecting (or from its previous answer) to finish
  its headers, and may pause at most that long inside a body; then it gets a 408 when no
  answer was started, and the connection closes;
- a whole body must arrive within ``body_timeout_s`` of its first byte, however it is paced
  (issue 40: one byte every 2 s never paused long enough, and held the request open with no
  end); past it, the same 408. Time the service itself stops reading (the app is behind)
  is not counted against the client;
- a request h11 cannot parse gets a 400 in JSON, not uvicorn's text/plain.

h11 (pure Python) parses slower than httptools, but a request's cost here is the model's:
a 51 MB ``/batch_predict`` body is read in the same chunks either way.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 100
HEADERS_HINT = (f"send fewer or shorter headers (at most {MAX_HEADERS} fields, "
                f"{MAX_HEADER_BYTES // 1024} KiB in all)")
_HINTS = {
    400: "send a well-formed HTTP/1.1 request (an HTTP client library does)",
    408: "send the whole request without pausing; the limits are CHORD_API_READ_TIMEOUT_S "
         "(a pause) and CHORD_API_BODY_TIMEOUT_S (a whole body)",
    431: HEADERS_HINT,
}


# The client's states once its whole request is in: DONE, or MUST_CLOSE when it sent
# ``Connection: close`` (urllib always does). Missing MUST_CLOSE left the deadline armed, and
# a slow answer to such a client, a job's event stream for the one-shot CLI, was cut 10 s
# after it connected.
_REQUEST_IN = (h11.DONE, h11.MUST_CLOSE)


class _Connection(h11.Connection):
    """h11's connection, remembering the last parse error (its status hint: 431 when the
    header block outgrew the buffer)."""

    last_error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.last_error = exc
            raise


class GuardedH11Protocol(H11Protocol):
    """uvicorn's ``H11Protocol`` with a read deadline and JSON parse errors. ``read_timeout_s``
    is set on the class by ``protocol_class`` (uvicorn builds the protocol itself)."""

    read_timeout_s: float = 10.0
    body_timeout_s: float = 300.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = _Connection(h11.SERVER, MAX_HEADER_BYTES)
        self._deadline: Any = None
        self._body_until: float | None = None  # when the body being read must be in

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, delay: float | None = None) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(
            self.read_timeout_s if delay is None else delay, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.SEND_BODY:
            now = self.loop.time()
            if self._body_until is None:
                self._body_until = now + self.body_timeout_s
            # a body may pause, but never longer than the limit, nor last past its own
            self._arm(min(self.read_timeout_s, max(0.0, self._body_until - now)))
        elif self.conn.their_state in _REQUEST_IN:
            self._disarm()  # the request is in: the app takes its time
            self._body_until = None
        # IDLE: still in the headers; the deadline armed when they began holds

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._body_until = None
        if not self.transport.is_closing():
            self._arm()  # the next request's headers (the keep-alive timer also runs)

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.flow.read_paused:  # we stopped reading (the app is behind), not the client
            if self._body_until is not None:  # that wait is not the client's
                self._body_until += self.read_timeout_s
            return self._arm()
        cycle = self.cycle
        answered = cycle is not None and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app sees a disconnect; what it sends is dropped
            cycle.message_event.set()
        if answered or (self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]):
            self.transport.close()  # nothing was asked, or an answer is under way
            return
        if self._body_until is not None and self.loop.time() >= self._body_until:
            return self._answer(408, f"the request body was not received within "
                                     f"{self.body_timeout_s:g} s")
        self._answer(408, f"the request was not received within {self.read_timeout_s:g} s")

    def send_400_response(self, msg: str) -> None:
        error = self.conn.last_error if isinstance(self.conn, _Connection) else None
        hint = error.error_status_hint if error is not None else 400
        status = 431 if hint == 431 else 400
        message = "the request headers are too large" if status == 431 else \
            "the request is not valid HTTP/1.1"
        self._answer(status, message)

    def _answer(self, status: int, message: str) -> None:
        """Write ``{"error", "hint"}`` with ``status`` on a fresh h11 state and close: the
        request was not (fully) read, so the connection cannot carry another."""
        body = json.dumps({"error": message, "hint": _HINTS.get(status, "")}).encode()
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.next_event()
        head = conn.send(h11.Response(
            status_code=status, reason=HTTPStatus(status).phrase,
            headers=[(b"content-type", b"application/json"),
                     (b"content-length", str(len(body)).encode()), (b"connection", b"close")]))
        self.transport.write(head + conn.send(h11.Data(data=body)))
        self._disarm()
        self.transport.close()


def protocol_class(read_timeout_s: float,
                   body_timeout_s: float = 300.0) -> type[GuardedH11Protocol]:
    """The protocol class for uvicorn's ``http=`` with these read timeouts."""
    return type("ChordH11Protocol", (GuardedH11Protocol,),
                {"read_timeout_s": read_timeout_s, "body_timeout_s": body_timeout_s})
