"""The service's HTTP layer under hostile clients, through a real uvicorn on 127.0.0.1 (in a
thread, with the service's own protocol and settings): the key is checked before any body
byte and before routing, headers are bounded, slow clients time out, and a 500 closes its
connection cleanly. The runtime is a fake at its boundary (no workers are needed: nothing
here reaches one; the real service's behaviour is in test_service_hardening.py)."""

from __future__ import annotations

import socket
from http import HTTPStatus
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

KEY = "k3y-for-tests"
READ_TIMEOUT_S = 1.0
AUTH = {"authorization": f"Bearer {KEY}"}


class _BrokenRuntime(SimpleNamespace):
    """What the app calls on its runtime; ``submit`` has a bug (for the 500 path)."""

    async def submit(self, specs):
        raise RuntimeError("a bug in the runtime")


@pytest.fixture(scope="module")
def url():
    import uvicorn

    from chord_core.service.app import create_app
    from chord_core.service.cli import _http_limits
    from chord_core.service.settings import ServiceSettings

    settings = ServiceSettings(api_key=KEY, max_body_bytes=1024 * 1024,
                               read_timeout_s=READ_TIMEOUT_S)
    manager = SimpleNamespace(workers=lambda: [{"worker": "w0", "state": "ready",
                                                "devices": ["cpu"]}])
    runtime = _BrokenRuntime(manager=manager, model="test", started_at=time.time())
    config = uvicorn.Config(create_app(runtime, settings), log_level="critical",
                            **_http_limits(settings))
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _raw(url: str, data: bytes, *, wait_s: float = 5.0) -> tuple[bytes, float]:
    """Send ``data`` on a fresh socket; (everything the server sent until it closed, the
    seconds that took)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=wait_s) as s:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server answered and closed while we were still sending
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    return out, time.monotonic() - t0


def _json_error(raw: bytes, status: int) -> dict:
    import json

    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode()), raw[:300]
    assert b"content-type: application/json" in head.lower()
    doc = json.loads(body)
    assert doc["error"] and doc["hint"], doc
    return doc


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/models"), ("GET", "/openapi.json"), ("GET", "/docs"),
    ("DELETE", "/v1/models"), ("PUT", "/batch_predict"), ("GET", "/no/such/route"),
    ("POST", "/v1/chat/completions"), ("POST", "/v1/jobs"), ("POST", "/batch_predict"),
], ids=["models", "openapi", "docs", "wrong-method", "wrong-method-batch", "unknown-route",
        "chat", "jobs", "batch"])
def test_every_route_but_health_needs_the_key_before_anything_else(url, method, path) -> None:
    r = httpx.request(method, url + path, content=b"{not json")
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer" and r.headers["connection"] == "close"
    error = r.json()["error"]
    assert "API key" in (error["message"] if isinstance(error, dict) else error)
    assert httpx.get(url + "/health").status_code == 200


def test_with_the_key_the_schema_and_the_real_statuses_show(url) -> None:
    assert httpx.get(url + "/openapi.json", headers=AUTH).json()["info"]["title"]
    assert httpx.delete(url + "/v1/models", headers=AUTH).status_code == 405
    r = httpx.post(url + "/v1/chat/completions", headers=AUTH, content=b"{not json")
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_big_body_without_the_key_is_refused_before_it_is_read(url, chunked) -> None:
    """Only the headers and the first 64 KiB go out; the 401 comes back at once (before,
    100 MiB got theirs after 5.25 s with the service +700 MiB)."""
    length = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: 104857600"
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n" + length + b"\r\n\r\n")
    body = (b"10000\r\n" if chunked else b"") + b"[" * 65536
    raw, took = _raw(url, head + body)
    assert _json_error(raw, 401)["error"]["code"] == 401
    assert took < 3.0


def test_a_500_closes_its_connection_and_a_pooled_client_goes_on(url) -> None:
    with httpx.Client(base_url=url, headers=AUTH) as client:
        r = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": _png_data_url()}}]}]})
        assert r.status_code == 500 and r.headers["connection"] == "close"
        assert r.json()["error"]["message"].startswith("internal error in the Chord service")
        assert "Traceback" not in r.text
        for _ in range(3):  # the pool opens a new connection instead of reusing a dead one
            assert client.get("/v1/models").status_code == 200


def _png_data_url() -> str:
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("headers,status", [
    ([("X-Big", "a" * (100 * 1024))], 431),
    ([("X-Big", "a" * (8 * 1024 * 1024))], 431),
    ([(f"X-F{i}", "v") for i in range(150)], 431),
    ([("X-Ok", "a" * 1000)] * 20, 200),
], ids=["100KiB", "8MiB", "150-fields", "20KB-ok"])
def test_headers_are_bounded_in_size_and_count(url, headers, status) -> None:
    lines = b"".join(f"{k}: {v}\r\n".encode() for k, v in headers)
    raw, took = _raw(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + lines + b"\r\n")
    if status == 200:
        assert raw.startswith(b"HTTP/1.1 200 ")
    else:
        assert "header" in _json_error(raw, status)["error"]
    assert took < 5.0


@pytest.mark.parametrize("data", [b"\x16\x03\x01\x02\x00garbage\r\n\r\n",
                                  b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n"],
                         ids=["tls-hello", "bad-header-line"])
def test_unparsable_requests_get_a_json_400(url, data) -> None:
    raw, _ = _raw(url, data)
    assert "not valid HTTP" in _json_error(raw, 400)["error"]


def test_stalled_sockets_are_closed_after_the_read_timeout(url) -> None:
    """20 sockets: silent, half a request line, half the headers, headers then half a
    body. All are closed within the read timeout (+ slack); the ones that started a
    request get a 408."""
    partial = [b"", b"GET /heal", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n",
               b"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
               + KEY.encode() + b"\r\nContent-Length: 100\r\n\r\n{\"task\""]
    socks = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", _port(url)), timeout=READ_TIMEOUT_S * 6)
        s.sendall(partial[i % 4])
        socks.append((i % 4, s))
    t0 = time.monotonic()
    for kind, s in socks:
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        s.close()
        if kind == 0:
            assert out == b""
        else:
            assert "not received within" in _json_error(out, 408)["error"]
    assert time.monotonic() - t0 < READ_TIMEOUT_S * 4
    assert httpx.get(url + "/health").status_code == 200  # and the service is fine


def test_a_body_that_keeps_coming_is_not_cut(url) -> None:
    """A slow but steady body (pauses under the limit) is read whole."""
    body = b'{"messages": []}'
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
            b"Bearer " + KEY.encode() + b"\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as s:
        s.sendall(head)
        for i in range(0, len(body), 4):
            time.sleep(READ_TIMEOUT_S * 0.4)
            s.sendall(body[i:i + 4])
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    assert "messages is empty" in _json_error(out, 400)["error"]["message"]


async def _slow_stream(scope, receive, send) -> None:  # noqa: ANN001
    """An answer that starts late and then pauses, each longer than the read timeout, as a
    job's event stream does while its worker warms up."""
    import asyncio

    if scope["type"] != "http":
        return
    await asyncio.sleep(READ_TIMEOUT_S * 2.5)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    for part in (b"event: state\ndata: 1\n\n", b"event: end\ndata: 2\n\n"):
        await send({"type": "http.response.body", "body": part, "more_body": True})
        await asyncio.sleep(READ_TIMEOUT_S * 2.5)
    await send({"type": "http.response.body", "body": b""})


def test_a_slow_answer_to_a_client_that_sends_connection_close_is_not_cut() -> None:
    """urllib (the one-shot CLI's client) sends ``Connection: close``; h11 then leaves the
    request in MUST_CLOSE, not DONE. The read deadline stayed armed there and closed the
    job's event stream 10 s after it connected (the CLI said "did not finish: no result");
    the request is in once it is whole, in either state."""
    import urllib.request

    import uvicorn

    from chord_core.service.protocol import protocol_class

    config = uvicorn.Config(_slow_stream, log_level="critical", lifespan="off",
                            http=protocol_class(READ_TIMEOUT_S))
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        port = sock.getsockname()[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/events", timeout=30) as resp:
            assert resp.headers.get("connection", "").lower() != "keep-alive"
            body = resp.read()
        assert body == b"event: state\ndata: 1\n\nevent: end\ndata: 2\n\n"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
