"""Ingest: one live source read with PyAV, its packets handed to the segment writer.

The loop a camera needs (Frigate's, in substance): RTSP over TCP; a timeout on connecting and
on every read (PyAV's interrupt callback: a server that never answers, or stops sending, ends
the wait); a **stall** — no video packet for ``stall_s`` seconds while the session stays
open — ends the session; every ended session is followed by a reconnect after a backoff that
doubles from ``backoff_s`` up to ``backoff_max_s`` (reset once a session delivered frames).
Wrong credentials (401/403) are not retried: the state is ``failed`` until the stream is
started again with others. A clock that goes back or leaps forward cuts the segment (the
next one starts at the next keyframe) and is counted.

States: connecting → live ⇄ stalled/reconnecting → … ; stopped (asked to) or failed (will
not retry). Every state change carries the last error, **masked** (sources.mask_text).
Memory is bounded by design: packets go straight to the open segment file; nothing queues.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Callable

from chord_core.streams.segments import SegmentWriter
from chord_core.streams.sources import StreamSource, mask_text

log = logging.getLogger(__name__)


class StreamState(StrEnum):
    CONNECTING = "connecting"
    LIVE = "live"
    STALLED = "stalled"
    RECONNECTING = "reconnecting"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True)
class IngestSettings:
    open_timeout_s: float = 10.0  # connect + describe + first packet
    read_timeout_s: float = 10.0  # one read (Frigate: a 10 s socket timeout)
    stall_s: float = 20.0  # no video packet this long: the session is restarted
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    jump_s: float = 5.0  # a forward leap of the clock past this cuts the segment


@dataclass
class StreamStatus:
    """A stream's state as everyone sees it (``/health``, the service, the app)."""

    state: StreamState = StreamState.CONNECTING
    last_error: str = ""
    since: float = field(default_factory=time.time)
    attempts: int = 0  # connection attempts in all
    reconnects: int = 0  # sessions started after the first
    sessions: int = 0  # sessions that delivered at least one packet
    packets: int = 0
    clock_jumps: int = 0
    last_packet_wall: float | None = None
    next_try_s: float = 0.0  # the backoff before the next attempt

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["state"] = str(self.state)
        return out


class _Stalled(Exception):
    pass


class Ingest:
    """Reads ``source`` until ``stop`` is set (run it in a thread: ``start``)."""

    def __init__(self, source: StreamSource, writer: SegmentWriter, settings: IngestSettings,
                 on_status: Callable[[StreamStatus], None] | None = None) -> None:
        self.source, self.writer, self.settings = source, writer, settings
        self.on_status = on_status
        self.status = StreamStatus()
        self.stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._live, self._last_packet = False, time.monotonic()

    def start(self) -> Ingest:
        self._thread = threading.Thread(target=self.run, name=f"ingest-{self.source.stream_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self.stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else
                              self.settings.read_timeout_s + self.settings.open_timeout_s + 5)

    def snapshot(self) -> StreamStatus:
        with self._lock:
            return replace(self.status)

    def _set(self, state: StreamState, error: str | None = None, *, force: bool = False,
             **more: Any) -> None:
        with self._lock:
            changed = force or state != self.status.state or (
                error is not None and error != self.status.last_error)
            if state != self.status.state:
                self.status.since = time.time()
            self.status.state = state
            if error is not None:
                self.status.last_error = mask_text(error, self.source.url)
            for key, value in more.items():
                setattr(self.status, key, value)
            snap = replace(self.status)
        if changed:
            log.info("stream %s: %s%s", self.source.shown, state,
                     f" ({snap.last_error})" if snap.last_error and error else "")
            if self.on_status is not None:
                self.on_status(snap)

    def run(self) -> None:
        backoff = self.settings.backoff_s
        first = True
        try:
            while not self.stop_event.is_set():
                self._set(StreamState.CONNECTING if first else StreamState.RECONNECTING,
                          force=first)
                with self._lock:
                    self.status.attempts += 1
                    if not first:
                        self.status.reconnects += 1
                first = False
                delivered, final = self._session()
                if final:
                    return
                backoff = self.settings.backoff_s if delivered else min(
                    backoff * 2, self.settings.backoff_max_s)
                with self._lock:
                    self.status.next_try_s = backoff
                self.stop_event.wait(backoff)
        finally:
            self.writer.close("stop")
            if self.status.state != StreamState.FAILED:
                self._set(StreamState.STOPPED)

    def _session(self) -> tuple[bool, bool]:
        """One connection: (delivered packets, final: do not reconnect)."""
        import av

        box = None
        delivered = False
        self._live, self._last_packet = False, time.monotonic()
        began = time.monotonic()
        try:
            box = av.open(self.source.url, options=self._options(), format=self._format(),
                          timeout=(self.settings.open_timeout_s, self.settings.read_timeout_s))
            delivered = self._pump(box)
            if not self.stop_event.is_set():
                self._set(StreamState.RECONNECTING, "the stream ended (the server closed it)")
        except _Stalled as exc:
            self._set(StreamState.STALLED, str(exc))
            delivered = True
        except (av.error.HTTPUnauthorizedError, av.error.HTTPForbiddenError) as exc:
            self._set(StreamState.FAILED, f"the camera refused the credentials: {exc} — give "
                      "the right user and password in the URL, then start the stream again")
            return delivered, True
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            quiet = time.monotonic() - self._last_packet
            if self._live and quiet >= min(self.settings.stall_s,
                                           self.settings.read_timeout_s) - 0.5:
                self._set(StreamState.STALLED, f"no frame for {quiet:.0f} s")
            else:
                waited = time.monotonic() - began
                self._set(StreamState.RECONNECTING if not self.stop_event.is_set()
                          else StreamState.STOPPED,
                          _reason(exc, waited, self.settings.open_timeout_s))
            delivered = self._live
        finally:
            self.writer.close("reconnect")
            if box is not None:
                try:
                    box.close()
                except Exception:  # noqa: BLE001 — closing a broken session
                    pass
        return delivered, self.stop_event.is_set()

    def _options(self) -> dict[str, str]:
        timeout_us = str(int(self.settings.read_timeout_s * 1e6))
        if self.source.kind in ("rtsp", "rtsps"):
            return {"rtsp_transport": "tcp", "timeout": timeout_us, "analyzeduration": "500000",
                    "probesize": "500000", "fflags": "+genpts+discardcorrupt"}
        if self.source.kind == "hls":
            return {"rw_timeout": timeout_us, "reconnect": "1"}
        return {}

    def _format(self) -> str | None:
        return "v4l2" if self.source.kind == "device" else None

    def _pump(self, box: Any) -> bool:
        """Packets into segments until the session ends; raises ``_Stalled`` when it ended
        because nothing came (a read timed out: FFmpeg reports it as the end of the stream,
        flushing the frame it held, so the gap before that last packet counts too)."""
        video = box.streams.video[0]
        base = float(video.time_base)
        last_t: float | None = None
        delivered = False
        gap = 0.0
        for packet in box.demux(video):
            if self.stop_event.is_set():
                return delivered
            now = time.monotonic()
            gap, self._last_packet = now - self._last_packet, now
            if packet.pts is None or packet.size == 0:
                continue
            t = packet.pts * base
            if last_t is not None and (t < last_t - 0.5 or t > last_t + self.settings.jump_s):
                self.writer.close("clock")
                with self._lock:
                    self.status.clock_jumps += 1
                log.info("stream %s: the clock jumped %.2f → %.2f s; segment cut",
                         self.source.shown, last_t, t)
            last_t = t
            self.writer.write(packet, video, t, time.time())
            if not delivered:
                delivered = self._live = True
                with self._lock:
                    self.status.sessions += 1
                self._set(StreamState.LIVE, "")
            with self._lock:
                self.status.packets += 1
                self.status.last_packet_wall = time.time()
        quiet = max(gap, time.monotonic() - self._last_packet)
        if delivered and not self.stop_event.is_set() and quiet >= 0.5 * min(
                self.settings.stall_s, self.settings.read_timeout_s):
            raise _Stalled(f"no frame for {quiet:.0f} s")  # the read timed out
        return delivered


def _reason(exc: BaseException, waited: float, timeout_s: float) -> str:
    import av

    if isinstance(exc, av.error.ExitError) or waited >= timeout_s - 0.3:
        return f"no answer within {timeout_s:g} s"
    if isinstance(exc, av.error.FFmpegError) and exc.strerror:
        return f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return str(exc) or type(exc).__name__


__all__ = ["Ingest", "IngestSettings", "StreamState", "StreamStatus"]
