"""``GET /v1/alerts/events``: the alerts as server-sent events, held by the event loop alone.

Measured before (issue 40): each subscriber slept in a thread of the pool (a wait of 2 s on
the alerts' condition, again and again), so 150 idle subscribers pushed ``/health`` to 6 s
and a job submit to 17 s, 300 to 12.6 s and 27.8 s: the 40 threads were all asleep. Now:

- one **bell** per app: a single thread waits on the alerts' condition (this process's
  stores, and other processes' through the signal file) and rings an ``asyncio`` event;
  every stream awaits that event, so an idle stream holds no thread, only a coroutine;
- the table is read (in the pool, briefly) only when the bell rang or every
  ALERT_FALLBACK_S (ALERT_RECHECK_S without file events);
- a ``ping`` comment every PING_S keeps proxies from closing a quiet stream, and a stream
  with nothing to send for IDLE_S ends with ``event: end`` (the client reconnects with its
  ``Last-Event-ID``); ``timeout`` bounds its whole life;
- a key (without a key, a client address) holds at most ``max_streams`` streams (429 past);
- ``after`` and ``Last-Event-ID`` are an alert id: ASCII digits, at most MAX_ALERT_ID (a 400
  otherwise, before the stream starts; a huge one cut the connection).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import weakref
from typing import TYPE_CHECKING, AsyncIterator

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from chord_core.service.http_errors import ApiError

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

ALERT_RECHECK_S = 1.0
ALERT_FALLBACK_S = 15.0
PING_S = 15.0
IDLE_S = 900.0
MAX_ALERT_ID = 2 ** 63 - 1  # SQLite's largest integer
ID_HINT = "give the id of an alert (digits, e.g. 0 for all of them)"


def alert_id(name: str, text: str) -> int:
    """``after`` / ``Last-Event-ID`` as an alert id; ApiError 400 for anything else."""
    text = text.strip()
    if not text:
        return 0
    if len(text) > 19 or not text.isascii() or not text.isdigit() or int(text) > MAX_ALERT_ID:
        raise ApiError(400, f"{name} {text[:40]!r} is not an alert id", ID_HINT)
    return int(text)


class Bell:
    """Rings (an ``asyncio`` event, replaced after each ring) when an alert is stored."""

    def __init__(self, loop: asyncio.AbstractEventLoop, live: bool) -> None:
        from chord_core.library.alerts import alerts_stored

        self.loop, self.live, self.rings = loop, live, 0
        self._event = asyncio.Event()
        self._seen = alerts_stored()
        threading.Thread(target=self._watch, name="chord-alert-bell", daemon=True).start()

    def _watch(self) -> None:
        from chord_core.library.alerts import wait_for_alert

        while not self.loop.is_closed():
            cursor = wait_for_alert(self._seen, 5.0)
            if cursor > self._seen:
                self._seen = cursor
                try:
                    self.loop.call_soon_threadsafe(self._ring)
                except RuntimeError:  # the loop closed: the app stopped
                    return

    def _ring(self) -> None:
        self.rings += 1
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, rings: int, timeout: float) -> bool:
        """True when the bell rang since ``rings`` (at once if it had), else after
        ``timeout`` seconds False."""
        if self.rings != rings:
            return True
        try:
            await asyncio.wait_for(self._event.wait(), max(0.0, timeout))
        except asyncio.TimeoutError:
            return False
        return True


async def bell(request: Request, index: LibraryIndex) -> Bell:
    """The app's one bell, started by its first stream."""
    from chord_core.library.alerts import listen_for_alerts

    state = request.app.state
    found = getattr(state, "alert_bell", None)
    if found is None:
        live = await run_in_threadpool(listen_for_alerts, index)
        found = getattr(state, "alert_bell", None)  # another stream may have made it
        if found is None:
            found = state.alert_bell = Bell(asyncio.get_running_loop(), live)
    return found


def _holder(request: Request) -> str:
    """Who a stream counts against: the key's hash, or the client's address."""
    auth = request.headers.get("authorization", "")
    if auth:
        return "k" + hashlib.sha256(auth.encode("latin-1", "replace")).hexdigest()[:16]
    return "a" + (request.client.host if request.client else "?")


class Slot:
    """One open stream of a holder. Counted while it lives: the stream's generator holds it,
    so it goes when the stream ends, is cancelled, or never started (then it is collected)."""


def take(request: Request) -> Slot:
    """A stream slot for this request's holder; 429 (before any byte of the stream) when
    it holds ``max_streams`` already."""
    state = request.app.state
    streams: dict[str, weakref.WeakSet[Slot]] | None = getattr(state, "alert_streams", None)
    if streams is None:
        streams = state.alert_streams = {}
    cap = int(getattr(state.settings, "max_streams", 1024))
    live = streams.setdefault(_holder(request), weakref.WeakSet())
    if len(live) >= cap:
        raise ApiError(429, f"this key already holds {cap} alert streams",
                       "close some (one stream carries every alert), or raise "
                       "CHORD_API_MAX_STREAMS on the server", {"Retry-After": "15"})
    slot = Slot()
    live.add(slot)
    return slot


async def events(request: Request, index: LibraryIndex, start: int, timeout: float, ring: Bell,
                 slot: Slot) -> AsyncIterator[str]:
    """The stream's text (see the module docstring); ``slot`` lives as long as it does."""
    from chord_core.library.alerts import list_alerts

    now = time.monotonic()
    deadline, ping = now + timeout, now + PING_S
    idle_until = now + min(IDLE_S, timeout)
    recheck = ALERT_FALLBACK_S if ring.live else ALERT_RECHECK_S
    read_at, rang, rings = now, True, ring.rings
    while (now := time.monotonic()) < min(deadline, idle_until):
        if rang or now >= read_at:
            read_at, rings = now + recheck, ring.rings
            for alert in await run_in_threadpool(list_alerts, index, after_id=start):
                start = int(alert["id"])
                idle_until = time.monotonic() + min(IDLE_S, timeout)
                yield f"id: {start}\nevent: alert\ndata: {json.dumps(alert)}\n\n"
        if time.monotonic() >= ping:
            ping = time.monotonic() + PING_S
            yield ": ping\n\n"
        rang = await ring.wait(rings, min(read_at, ping, deadline, idle_until)
                               - time.monotonic())
    del slot
    yield "event: end\ndata: {}\n\n"
