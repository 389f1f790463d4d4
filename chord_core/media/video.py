"""Video input: read a file's frames with PyAV (fast route) or OpenCV (FFmpeg backend).

* what the file really is (:class:`VideoInfo`) is :func:`chord_core.media.probe.probe`.
* :func:`read_frames` — decode sampled frames: PyAV (threaded, see :mod:`chord_core.media.av_reader`)
  with OpenCV as the fallback; :func:`iter_frames` — every frame, OpenCV.

Which frames to read is planned in :mod:`chord_core.media.sampling` (pure).

Conventions: every frame returned is RGB uint8 H×W×3 in DISPLAYED orientation; BGR exists only
inside this module. Rotation: OpenCV's FFmpeg backend reports the display-matrix rotation as
``CAP_PROP_ORIENTATION_META`` (clockwise degrees, the same convention as
``VideoInfo.rotation``) and, by default, rotates decoded frames itself
(``CAP_PROP_ORIENTATION_AUTO``). We switch that auto-rotation OFF on every capture and rotate
once ourselves, so frames are upright exactly once whatever the OpenCV default is; if a backend
refuses to turn it off we apply no rotation of our own. PyAV never rotates; its route reads the
same display matrix from the decoded frames.
"""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal

import numpy as np

from chord_core.errors import JobCancelled, VideoError
from chord_core.media.probe import (  # capture helpers shared with the probe
    FALLBACK_FPS,
    _check_file,
    _meta_rotation,
    _no_frames_error,
    _open,
    rotated_wh,
    upright,
)

__all__ = ["ProgressFn", "iter_frames", "read_frames", "read_frames_timed"]

log = logging.getLogger(__name__)

SEEK_MIN_GAP = 150  # frames: below this, grabbing forward is cheaper than a keyframe seek
SEEK_EVIDENCE = 8  # consecutive on-time frames required before seeking is trusted
ProgressFn = Callable[[int, int], None]


# -- reading frames ----------------------------------------------------------------------

class _Cursor:
    """Sequential grab() over a capture that seeks forward only when safe.

    A seek (``CAP_PROP_POS_FRAMES``) is used for gaps over ``SEEK_MIN_GAP`` frames, and only
    after ``SEEK_EVIDENCE`` frames were on time (pts = first pts + k / header fps): OpenCV maps
    frame numbers to times with the header fps, which is wrong for VFR clips or lying headers.
    A landing is verified (position and timestamp); on any mismatch the capture is reopened
    and read sequentially from the start, and seeking stays off.
    """

    def __init__(self, p: Path, allow_seek: bool, cancel: threading.Event | None) -> None:
        import cv2

        self.p, self.cancel = p, cancel
        self.cap = _open(p)
        fps = self.cap.get(cv2.CAP_PROP_FPS)
        self.step_ms = 1000.0 / fps if math.isfinite(fps) and fps > 0 else 0.0
        self.allow_seek = allow_seek and self.step_ms > 0
        self.next = 0  # index of the frame the next grab() returns
        self.t0: float | None = None
        self.on_time = 0
        self.first_ms: float | None = None  # frame 0's CAP_PROP_POS_MSEC

    def close(self) -> None:
        self.cap.release()

    def time_s(self) -> float:
        """The grabbed frame's own presentation time, seconds from frame 0 (NaN: unknown)."""
        import cv2

        if self.first_ms is None:
            return float("nan")
        return (self.cap.get(cv2.CAP_PROP_POS_MSEC) - self.first_ms) / 1000.0

    def _timing_ok(self, index: int) -> bool:
        import cv2

        ms = self.cap.get(cv2.CAP_PROP_POS_MSEC)
        if self.t0 is None:
            self.t0 = ms - index * self.step_ms
        return abs(ms - (self.t0 + index * self.step_ms)) <= 0.5 * self.step_ms

    def grab(self) -> bool:
        import cv2

        if not self.cap.grab():
            return False
        if self.next == 0:
            self.first_ms = self.cap.get(cv2.CAP_PROP_POS_MSEC)
        if self.allow_seek:
            if self._timing_ok(self.next):
                self.on_time += 1
            else:
                self.allow_seek = False
        self.next += 1
        if self.cancel is not None and self.next % 64 == 0 and self.cancel.is_set():
            raise JobCancelled("reading video frames was cancelled", hint="start the job again")
        return True

    def _seek(self, index: int) -> bool:
        """Seek so that frame ``index`` is grabbed; True when it was. A landing short of
        ``index`` whose timestamp checks out is walked on from; anything else reopens."""
        import cv2

        self.cap.set(cv2.CAP_PROP_POS_FRAMES, index)
        landed = int(round(self.cap.get(cv2.CAP_PROP_POS_FRAMES)))
        if self.next <= landed <= index and self.cap.grab() and self._timing_ok(landed):
            self.next = landed + 1
            if landed < index:
                self.allow_seek = False
            return landed == index
        log.info("%s: seek to frame %d not exact (landed %d); reading sequentially",
                 self.p.name, index, landed)
        self.cap.release()
        self.cap = _open(self.p)
        self.next, self.allow_seek = 0, False
        return False

    def grab_at(self, index: int) -> bool:
        """Grab frame ``index`` (≥ ``next``); False when the stream ends first."""
        while self.next <= index:
            gap = index - self.next
            if gap > SEEK_MIN_GAP and self.allow_seek and self.on_time >= SEEK_EVIDENCE:
                if self._seek(index):
                    return True
                continue
            if not self.grab():
                return False
        return True


def _check_indices(frame_indices: Iterable[int]) -> tuple[int, ...]:
    wanted = tuple(int(i) for i in frame_indices)
    if any(i < 0 for i in wanted) or any(b <= a for a, b in zip(wanted, wanted[1:])):
        raise ValueError("frame indices must be non-negative and strictly increasing")
    return wanted


def _to_rgb(bgr: np.ndarray, size_wh: tuple[int, int] | None, rotation: int) -> np.ndarray:
    """Decoded BGR (stored orientation) → RGB, resized to displayed ``size_wh``, upright."""
    import cv2

    if size_wh is not None:
        w, h = rotated_wh(size_wh, rotation)
        if bgr.shape[1] != w or bgr.shape[0] != h:
            bgr = cv2.resize(bgr, (int(w), int(h)), interpolation=cv2.INTER_AREA)
    return upright(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), rotation)


Backend = Literal["auto", "pyav", "opencv"]


def read_frames(path: str | Path, frame_indices: Iterable[int],
                size_wh: tuple[int, int] | None = None, **options: Any
                ) -> tuple[np.ndarray, tuple[int, ...]]:
    """(frames, indices read) of :func:`read_frames_timed`, without the times."""
    frames, read, _ = read_frames_timed(path, frame_indices, size_wh, **options)
    return frames, read


def read_frames_timed(path: str | Path, frame_indices: Iterable[int],
                      size_wh: tuple[int, int] | None = None, *, rotation: int | None = None,
                      on_progress: ProgressFn | None = None,
                      cancel: threading.Event | None = None, allow_seek: bool = True,
                      backend: Backend = "auto"
                      ) -> tuple[np.ndarray, tuple[int, ...], tuple[float, ...]]:
    """Decode the frames at ``frame_indices`` (strictly increasing) as a T×H×W×3 uint8 RGB
    array, upright, resized (area averaging) to ``size_wh`` = (w, h) when given.

    Index k is the k-th frame the decoder outputs. ``backend`` "auto" decodes with PyAV
    (threaded; only wanted frames are converted, straight to the target size; see
    :mod:`chord_core.media.av_reader`) and falls back to OpenCV (sequential grab()/retrieve(), see
    :class:`_Cursor`) when PyAV is missing or cannot read the file, and re-reads with OpenCV
    when PyAV ends before a wanted frame that OpenCV can decode; "pyav" / "opencv" force one.
    Work is skipped only where frame indices are provable from timestamps (PyAV: timestamp
    mode; OpenCV: verified seeks over long gaps); ``allow_seek=False`` (for clips probed as
    VFR) decodes and counts every frame up to the last wanted one. ``rotation`` None uses
    the file's rotation metadata; an int (clockwise degrees) overrides it. Frames missing at
    the end (the header over-promised) are dropped with a logged warning; returns (frames,
    indices actually read, each frame's own presentation time in seconds from frame 0 as
    the decoder reported it: PyAV ``frame.pts × time_base``, OpenCV ``CAP_PROP_POS_MSEC``;
    NaN where a frame carries none). None read → VideoError. ``cancel`` (threading.Event)
    is checked between frames → JobCancelled.
    """
    wanted = _check_indices(frame_indices)
    if not wanted:
        raise ValueError("no frame indices given")
    if backend not in ("auto", "pyav", "opencv"):
        raise ValueError(f"backend must be 'auto', 'pyav' or 'opencv', got {backend!r}")
    p = _check_file(path)
    progress = _monotonic(on_progress)
    times: list[float] = []
    args = (p, wanted, size_wh, rotation, progress, cancel, allow_seek, times)
    got = _read_pyav(*args, strict=backend == "pyav") if backend != "opencv" else None
    frames, seen = got if got is not None else _read_opencv(*args)
    if not frames and seen == 0:
        raise _no_frames_error(p, "")
    if not frames:
        raise VideoError(f"{p.name} has {seen} decodable frames; none of the requested "
                         f"frames (from index {wanted[0]}) exist",
                         hint="probe the file again: it may be truncated or have changed")
    if len(frames) < len(wanted):
        log.warning("%s: only %d of %d planned frames decode (the clip ends at frame %d, "
                    "before index %d)", p.name, len(frames), len(wanted), seen - 1,
                    wanted[len(frames)])
    return np.stack(frames), wanted[: len(frames)], tuple(times[: len(frames)])


def _monotonic(on_progress: ProgressFn | None) -> ProgressFn | None:
    """Progress that never goes back (a fallback re-read starts counting again)."""
    if on_progress is None:
        return None
    best = [0]

    def report(done: int, total: int) -> None:
        if done > best[0]:
            best[0] = done
            on_progress(done, total)

    return report


_AV_MISSING_SAID = False  # "PyAV is not installed" is logged once per process


def _read_pyav(p: Path, wanted: tuple[int, ...], size_wh: tuple[int, int] | None,
               rotation: int | None, on_progress: ProgressFn | None,
               cancel: threading.Event | None, allow_seek: bool, times: list[float], *,
               strict: bool) -> tuple[list[np.ndarray], int] | None:
    """Frames via PyAV; None when OpenCV must read them instead (logged at INFO)."""
    from chord_core.media.av_reader import AvFailed, AvMissing, read_frames_av

    global _AV_MISSING_SAID
    try:
        frames, seen = read_frames_av(p, wanted, size_wh, rotation=rotation,
                                      on_progress=on_progress, cancel=cancel,
                                      allow_seek=allow_seek, times_s=times)
    except AvFailed as e:
        if strict:
            raise VideoError(f"cannot decode {p.name} with PyAV: {e}",
                             hint="use backend='auto' to fall back to OpenCV") from e
        if not isinstance(e, AvMissing) or not _AV_MISSING_SAID:
            log.info("%s: %s; decoding with OpenCV instead", p.name, e)
        _AV_MISSING_SAID = _AV_MISSING_SAID or isinstance(e, AvMissing)
        return None
    if strict or len(frames) == len(wanted) or not _opencv_has(p, wanted[len(frames)]):
        return frames, seen
    log.info("%s: PyAV ends after %d frames but OpenCV decodes frame %d; reading with OpenCV",
             p.name, seen, wanted[len(frames)])
    return None


def _opencv_has(p: Path, index: int) -> bool:
    """Whether OpenCV decodes frame ``index`` (checks a PyAV read that ended early)."""
    cursor = _Cursor(p, True, None)
    try:
        return cursor.grab_at(index)
    finally:
        cursor.close()


def _read_opencv(p: Path, wanted: tuple[int, ...], size_wh: tuple[int, int] | None,
                 rotation: int | None, on_progress: ProgressFn | None,
                 cancel: threading.Event | None, allow_seek: bool, times: list[float]
                 ) -> tuple[list[np.ndarray], int]:
    """Frames via OpenCV grab()/retrieve() (:class:`_Cursor`): (frames, frames grabbed)."""
    cursor = _Cursor(p, allow_seek, cancel)
    rot = _meta_rotation(cursor.cap) if rotation is None else int(rotation) % 360
    frames: list[np.ndarray] = []
    times.clear()  # a PyAV read that fell back may have left some
    try:
        for done, index in enumerate(wanted):
            if cancel is not None and cancel.is_set():
                raise JobCancelled("reading video frames was cancelled", hint="start the job again")
            ok, bgr = (cursor.cap.retrieve() if cursor.grab_at(index) else (False, None))
            if not ok or bgr is None:
                break
            frame = _to_rgb(bgr, size_wh, rot)
            if frames and frame.shape != frames[0].shape:
                frame = _to_rgb(bgr, (frames[0].shape[1], frames[0].shape[0]), rot)
            frames.append(frame)
            times.append(cursor.time_s())
            if on_progress is not None:
                on_progress(done + 1, len(wanted))
    finally:
        cursor.close()
    return frames, cursor.next


def iter_frames(path: str | Path, *, size_wh: tuple[int, int] | None = None,
                rotation: int | None = None, fps: float | None = None,
                time_of: Callable[[int], float] | None = None
                ) -> Iterator[tuple[int, float, np.ndarray]]:
    """Every frame in order as (index, t_s, RGB upright frame). ``t_s`` is ``time_of(index)``
    when given (``VideoInfo.time_of``: the probe's container times, as in a plan), else
    index / ``fps`` when ``fps`` is given; else the frame's presentation time from the
    stream (relative to the first frame), falling back to index / header fps."""
    import cv2

    p = _check_file(path)
    cap = _open(p)
    try:
        rot = _meta_rotation(cap) if rotation is None else int(rotation) % 360
        header_fps = cap.get(cv2.CAP_PROP_FPS)
        ok = math.isfinite(header_fps) and header_fps > 0
        step = 1.0 / (fps or (header_fps if ok else FALLBACK_FPS))
        index, t_first, t_prev = 0, None, -1.0
        while cap.grab():
            ok, bgr = cap.retrieve()
            if not ok or bgr is None:
                break
            t = cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
            t_first = t if t_first is None else t_first
            t_s = index * step if fps or t - t_first <= t_prev else t - t_first
            t_s = time_of(index) if time_of is not None else t_s
            t_prev = t_s
            yield index, t_s, _to_rgb(bgr, size_wh, rot)
            index += 1
    finally:
        cap.release()
