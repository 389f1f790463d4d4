"""Frames decoded and resized on the fly, handed over through a bounded queue.

:func:`stream_frames` runs FFmpeg (PyAV) in a producer thread — decoding releases the GIL —
and yields ``(index, t_s, rgb)`` to the consumer. Frames are resized by FFmpeg's scaler
straight from the decoded picture, so a 1080p or 4K stream costs the consumer only the small
frames it asked for, and the queue holds at most ``maxsize`` of them: memory stays bounded
whatever the clip's length. ``keyframes_only`` asks the decoder for keyframes alone (it
skips every other frame's decoding: the cheap way to look at a multi-hour clip).

``index`` is the frame's position in the stream (the k-th frame the decoder outputs, as
sampling plans count); with ``keyframes_only`` it is found from the frame's own presentation
time on the probed timeline (``index_at``). ``t_s`` is the frame's own presentation time,
seconds from the first frame — never index / average fps.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Iterator

import numpy as np

from chord_core.errors import JobCancelled, VideoError
from chord_core.types import VideoInfo

log = logging.getLogger(__name__)

QUEUE_FRAMES = 32
_END = object()


def index_at(info: VideoInfo, t_s: float) -> int:
    """The frame whose presentation time (``info.time_of``) is nearest ``t_s``."""
    n = max(1, info.frame_count)
    lo, hi = 0, n - 1
    while lo < hi:  # first index with time ≥ t
        mid = (lo + hi) // 2
        if info.time_of(mid) < t_s:
            lo = mid + 1
        else:
            hi = mid
    if lo > 0 and abs(info.time_of(lo - 1) - t_s) <= abs(info.time_of(lo) - t_s):
        return lo - 1
    return lo


class _Producer(threading.Thread):
    """Decodes into the queue; any error is handed to the consumer as the last item."""

    def __init__(self, info: VideoInfo, size_wh: tuple[int, int], keyframes_only: bool,
                 out: queue.Queue, stop: threading.Event) -> None:
        super().__init__(name="chord-stream", daemon=True)
        self.info, self.size_wh, self.keyframes_only = info, size_wh, keyframes_only
        self.out, self.stop = out, stop

    def run(self) -> None:
        try:
            self._decode()
        except BaseException as exc:  # noqa: BLE001 — handed over, re-raised by the consumer
            self._put(exc)
        finally:
            self._put(_END)

    def _put(self, item: Any) -> bool:
        """Hand ``item`` over (blocking while the queue is full); False once stopped. A put
        blocked when the consumer stops is freed by its drain (``stream_frames``)."""
        if self.stop.is_set():
            return False
        self.out.put(item)
        return True

    def _decode(self) -> None:
        import av

        with av.open(self.info.path) as container:
            if not container.streams.video:
                raise VideoError(f"{self.info.path}: no video stream",
                                 hint="check that the file is a video")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            if self.keyframes_only:
                stream.codec_context.skip_frame = "NONKEY"
            w, h = self.size_wh
            pts0, index = None, 0
            for frame in container.decode(stream):
                if self.stop.is_set():
                    return
                if frame.pts is not None and pts0 is None:
                    pts0 = frame.pts
                t_s = float((frame.pts - pts0) * frame.time_base) \
                    if frame.pts is not None and frame.time_base is not None else float("nan")
                idx = index_at(self.info, t_s) if self.keyframes_only and t_s == t_s else index
                rgb = frame.to_ndarray(width=w, height=h, format="rgb24")
                if not self._put((idx, t_s, rgb)):
                    return
                index += 1


def stream_frames(info: VideoInfo, size_wh: tuple[int, int], *, keyframes_only: bool = False,
                  maxsize: int = QUEUE_FRAMES, cancel: threading.Event | None = None
                  ) -> Iterator[tuple[int, float, np.ndarray]]:
    """Every frame (or every keyframe) of ``info.path`` as ``(index, t_s, rgb)`` at
    ``size_wh`` (stored orientation: histograms do not care), decoded ahead in a thread into
    a queue of at most ``maxsize`` frames. Closing the generator stops the thread."""
    q: queue.Queue = queue.Queue(maxsize=max(1, maxsize))
    stop = threading.Event()
    producer = _Producer(info, size_wh, keyframes_only, q, stop)
    producer.start()
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise JobCancelled("reading the video was cancelled",
                                   hint="run it again; finished chunks are kept")
            item = q.get()  # the producer always ends with _END (or its error)
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise _as_video_error(info, item)
            yield item
    finally:
        stop.set()
        try:  # free a put blocked on the full queue: its next put sees stop (one fits)
            while True:
                q.get_nowait()
        except queue.Empty:
            pass
        producer.join(timeout=5)


def _as_video_error(info: VideoInfo, exc: BaseException) -> BaseException:
    if isinstance(exc, (VideoError, JobCancelled)):
        return exc
    try:
        import av

        if isinstance(exc, av.error.FFmpegError):
            return VideoError(f"{info.path}: decoding failed: {exc}",
                              hint="check that the file plays; re-encode it, e.g. "
                                   "`ffmpeg -i in.ext -c:v libx264 out.mp4`")
    except ImportError:
        pass
    return exc
