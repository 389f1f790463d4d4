"""Recording: a live stream's packets remuxed (never re-encoded) into segment files.

A segment starts on a keyframe and is closed at the first keyframe past ``segment_s``
seconds (so every segment plays on its own), or at once when the stream breaks: a reconnect,
or a clock that jumps or restarts (the packets' times go back, or leap past ``jump_s``). Its
times are rebased to start at 0, and the wall-clock time of its first packet is kept, so
"second 3.2 of segment 41" is a moment of the day. Files are fragmented MP4 (a fragment per
keyframe: a segment cut short by a crash still plays up to its last fragment), named
``<stream>-<YYYYmmdd-HHMMSS>-<seq>.mp4`` under ``<data dir>/streams/<stream>/``.

Retention (``prune``): segments older than ``max_age_s`` go, then the oldest ones while the
stream's folder is over ``max_bytes``. The results and alerts that point at a deleted segment
stay; they no longer play.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

MP4_OPTIONS = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}


@dataclass
class Segment:
    """One closed segment file (what the analysis and the store are told)."""

    stream_id: str
    seq: int
    path: str
    start_wall: float  # time.time() when its first packet arrived
    duration_s: float = 0.0
    frames: int = 0
    bytes: int = 0
    cut: str = ""  # why it ended early: "", "reconnect", "clock", "stop"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class _Open:
    box: Any
    stream: Any
    segment: Segment
    t0: float  # the first packet's time in the source, seconds
    last_t: float = 0.0
    last_dts: int | None = None
    frame_s: float = 0.0
    base: int | None = None  # the first packet's decode time, in the source's ticks


class SegmentWriter:
    """Writes one stream's packets into segments; ``on_closed(segment)`` for each closed."""

    def __init__(self, folder: str | Path, stream_id: str, segment_s: float,
                 on_closed: Callable[[Segment], None], *, container: str = "mp4",
                 first_seq: int = 0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.stream_id, self.segment_s, self.on_closed = stream_id, float(segment_s), on_closed
        self.container, self.seq = container, first_seq
        self._open: _Open | None = None
        self._held: tuple[Any, Any, float, float] | None = None

    def write(self, packet: Any, source: Any, t: float, wall: float) -> None:
        """Take one packet whose time is ``t`` s. Packets of one time (FFmpeg's RTP
        depacketiser may hand a picture's parameter sets or SEI apart from it) are joined
        into one access unit before it is muxed: a segment's frames keep distinct times."""
        held = self._held
        if held is not None and abs(held[2] - t) < 1e-6:
            import av

            joined = av.Packet(bytes(held[0]) + bytes(packet))
            joined.pts, joined.dts, joined.time_base = held[0].pts, held[0].dts, held[0].time_base
            joined.is_keyframe = bool(held[0].is_keyframe or packet.is_keyframe)
            self._held = (joined, source, t, held[3])
            return
        self._flush()
        self._held = (packet, source, t, wall)

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._mux(*held)

    def _mux(self, packet: Any, source: Any, t: float, wall: float) -> bool:
        """Mux one access unit; False when it was dropped (no keyframe yet since a cut)."""
        cur = self._open
        if cur is not None and packet.is_keyframe and t - cur.t0 >= self.segment_s:
            self._close(cur, "")
            cur = self._open = None
        if cur is None:
            if not packet.is_keyframe:
                return False
            cur = self._open = self._start(source, t, wall)
        # times in the source's ticks, less the segment's first decode time; pts keeps its
        # offset from dts (B-frames are reordered, not retimed); dts only goes forward
        pts_ticks = int(packet.pts)
        dts_ticks = int(packet.dts) if packet.dts is not None else pts_ticks
        if cur.base is None:
            cur.base = dts_ticks
        dts = dts_ticks - cur.base
        if cur.last_dts is not None and dts <= cur.last_dts:
            dts = cur.last_dts + 1
        packet.pts, packet.dts = max(dts, pts_ticks - cur.base), dts
        packet.stream = cur.stream
        cur.box.mux(packet)
        if cur.segment.frames and t > cur.last_t:
            cur.frame_s = max(1e-3, t - cur.last_t)
        cur.last_dts, cur.last_t = dts, max(t, cur.last_t)
        cur.segment.frames += 1
        return True

    def _start(self, source: Any, t: float, wall: float) -> _Open:
        import av

        self.seq += 1
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(wall))
        path = self.folder / f"{self.stream_id}-{stamp}-{self.seq:06d}.{self.container}"
        options = MP4_OPTIONS if self.container == "mp4" else {}
        box = av.open(str(path), "w", options=options)
        stream = box.add_stream_from_template(source)
        stream.time_base = source.time_base
        return _Open(box, stream, Segment(self.stream_id, self.seq, str(path), wall), t)

    def close(self, cut: str = "") -> Segment | None:
        """End the open segment (``cut`` says why, when it is early) and report it."""
        self._flush()
        cur, self._open = self._open, None
        return None if cur is None else self._close(cur, cut)

    def _close(self, cur: _Open, cut: str) -> Segment | None:
        try:
            cur.box.close()
        except Exception as exc:  # noqa: BLE001 — PyAV raises its own error types
            log.warning("segment %s closed with an error: %s", cur.segment.path, exc)
        seg = cur.segment
        seg.duration_s = round(cur.last_t - cur.t0 + (cur.frame_s or 0.0), 4)
        seg.cut = cut
        try:
            seg.bytes = Path(seg.path).stat().st_size
        except OSError:
            seg.bytes = 0
        if seg.frames == 0 or seg.bytes == 0:
            Path(seg.path).unlink(missing_ok=True)
            return None
        self.on_closed(seg)
        return seg


def prune(folder: str | Path, max_age_s: float | None, max_bytes: int | None,
          now: float | None = None) -> list[str]:
    """Delete a stream folder's segments past the retention (see the module docstring);
    returns the deleted paths, oldest first."""
    now = time.time() if now is None else now
    files = []
    for p in Path(folder).glob("*-*-*.*"):
        try:
            st = p.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, p))
    files.sort()
    gone: list[str] = []
    total = sum(size for _, size, _ in files)
    for mtime, size, p in files[:-1]:  # the newest one stays (it may be analysed now)
        too_old = max_age_s is not None and now - mtime > max_age_s
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        try:
            p.unlink()
        except OSError as exc:
            log.warning("retention: %s not deleted: %s", p, exc)
            continue
        total -= size
        gone.append(str(p))
    return gone


__all__ = ["Segment", "SegmentWriter", "prune"]
