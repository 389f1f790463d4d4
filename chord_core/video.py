"""Video input: probe a file and read its frames with OpenCV (FFmpeg backend).

* :func:`probe` — what the file really is (:class:`VideoInfo`). Headers lie, so every number
  is cross-checked by decoding a bounded amount (see its docstring).
* :func:`read_frames` / :func:`iter_frames` — decode frames.

Which frames to read is planned in :mod:`chord_core.sampling` (pure); its public names are
re-exported here so ``from chord_core.video import plan_sampling`` keeps working.

Conventions: every frame returned is RGB uint8 H×W×3 in DISPLAYED orientation; BGR exists only
inside this module. Rotation: OpenCV's FFmpeg backend reports the display-matrix rotation as
``CAP_PROP_ORIENTATION_META`` (clockwise degrees, the same convention as
``VideoInfo.rotation``) and, by default, rotates decoded frames itself
(``CAP_PROP_ORIENTATION_AUTO``). We switch that auto-rotation OFF on every capture and rotate
once ourselves, so frames are upright exactly once whatever the OpenCV default is; if a backend
refuses to turn it off we apply no rotation of our own.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from chord_core.errors import JobCancelled, VideoError
from chord_core.sampling import (
    MAX_ASPECT_RATIO,
    auto_fps,
    nframes_for,
    plan_sampling,
    smart_resize,
    spread_indices,
    video_metadata,
)
from chord_core.types import VideoInfo

__all__ = ["MAX_ASPECT_RATIO", "ProgressFn", "auto_fps", "iter_frames", "nframes_for",
           "plan_sampling", "probe", "read_frames", "smart_resize", "spread_indices",
           "video_metadata"]

log = logging.getLogger(__name__)

MAX_PLAUSIBLE_FPS = 240.0
FALLBACK_FPS = 25.0  # FFmpeg's own guess when a stream carries no timing at all
PROBE_PREFIX_FRAMES = 48  # decoded at the start to measure the real frame interval
PROBE_TAIL_FRAMES = 24  # decoded at the end to verify the header's frame count
PROBE_COUNT_PIXELS = 15_000_000_000  # cap on pixels decoded when counting frame by frame
PROBE_MIN_COUNT_FRAMES = 2_000
SEEK_MIN_GAP = 150  # frames: below this, grabbing forward is cheaper than a keyframe seek
SEEK_EVIDENCE = 8  # consecutive on-time frames required before seeking is trusted
FPS_TOLERANCE = 0.01  # header vs measured fps: relative disagreement that is corrected
ProgressFn = Callable[[int, int], None]


# -- files and captures ------------------------------------------------------------------

def _check_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise VideoError(f"video file not found: {p}",
                         hint="check the path and file name (and that the file was not moved)")
    if p.is_dir():
        raise VideoError(f"{p} is a folder, not a video file",
                         hint="pass the path of a video file such as clip.mp4")
    if p.stat().st_size == 0:
        raise VideoError(f"video file {p.name} is empty (0 bytes)",
                         hint="the upload or copy probably failed; copy the file again")
    return p


def _looks_like_text(p: Path) -> bool:
    with p.open("rb") as f:
        head = f.read(512)
    return bool(head) and all(b in b"\t\n\r" or 32 <= b < 127 for b in head)


def _open(p: Path) -> Any:
    """A cv2.VideoCapture on ``p`` with OpenCV's auto-rotation switched off."""
    import cv2

    cap = cv2.VideoCapture(str(p), cv2.CAP_FFMPEG)
    if not cap.isOpened():
        cap.release()
        if _looks_like_text(p):
            raise VideoError(f"{p.name} is a text file, not a video",
                             hint="pick the video file itself (MP4, MOV, MKV, WebM, AVI)")
        raise VideoError(
            f"cannot open {p.name}: not a video, or its container is damaged or unsupported",
            hint="check that it plays in a video player; if it was cut short (interrupted "
                 "download or copy) get the complete file; else re-encode it, e.g. "
                 "`ffmpeg -i in.ext -c:v libx264 out.mp4`")
    cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 0)
    return cap


def _meta_rotation(cap: Any) -> int:
    """Clockwise degrees to apply to decoded frames (0 when OpenCV rotates them itself)."""
    import cv2

    if cap.get(cv2.CAP_PROP_ORIENTATION_AUTO) > 0:
        return 0
    raw = cap.get(cv2.CAP_PROP_ORIENTATION_META)
    if not math.isfinite(raw):
        return 0
    return int(round(raw / 90.0)) * 90 % 360


def _fourcc(value: float) -> str:
    code = int(value) if math.isfinite(value) and value > 0 else 0
    text = "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4))
    return text.strip("\x00 ") if text.isprintable() else ""


def _plausible_fps(fps: float) -> bool:
    return math.isfinite(fps) and 0 < fps <= MAX_PLAUSIBLE_FPS


def _plausible_count(count: float) -> bool:
    return math.isfinite(count) and 0 < count < 1e9


def _no_frames_error(p: Path, codec: str) -> VideoError:
    return VideoError(f"{p.name} opened but no frame could be decoded"
                      + (f" (codec {codec})" if codec else ""),
                      hint="the file is probably truncated or uses a codec this OpenCV build "
                           "cannot decode; re-encode it to H.264, e.g. "
                           "`ffmpeg -i in.ext -c:v libx264 out.mp4`")


# -- probe -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Header:
    """What the container claims (any of it may be wrong)."""

    fps: float
    frame_count: float


@dataclass(frozen=True)
class _Decoded:
    """What decoding showed: timestamps (ms) of the first frames, the frame count, the last
    frame's timestamp. ``exact`` False: counting stopped after ``counted`` frames (probe
    limit) and ``frame_count`` is either that lower bound or the header's unverified claim."""

    times_ms: tuple[float, ...]
    frame_count: int
    exact: bool = True
    last_ms: float | None = None
    counted: int = 0


@dataclass(frozen=True)
class _Timeline:
    fps: float
    frame_count: int
    duration_s: float
    variable: bool
    warnings: tuple[str, ...]


def probe(path: str | Path) -> VideoInfo:
    """Describe a video file, trusting decoded frames over container headers.

    Strategy (bounded work, whatever the clip length):
    1. open with OpenCV's FFmpeg backend; read the header (fps, frame count, size, fourcc,
       rotation);
    2. decode the first ``PROBE_PREFIX_FRAMES`` frames, reading each frame's presentation time
       (``CAP_PROP_POS_MSEC``): the mean interval gives the real frame rate; intervals that
       vary mark a variable frame rate (VFR). The first frame's decoded shape is the coded size;
    3. verify the frame count: if the clip ended inside the prefix the count is exact; if the
       header count is plausible and the prefix is steady at the header's fps (OpenCV seeks by
       time = frame / header fps), seek to ``PROBE_TAIL_FRAMES`` before the claimed end and
       decode to the real end (a seek past a truncated end lands on the last decodable frame;
       if the landing frame does not decode, bisect with seeks); otherwise (count missing or
       absurd, VFR, fps mismatch, unreliable seek) count frame by frame, stopping after
       ``PROBE_COUNT_PIXELS`` decoded pixels (at least ``PROBE_MIN_COUNT_FRAMES``);
    4. reconcile (:func:`_reconcile`): every correction of the header becomes one sentence
       in ``warnings``.
    Limitation: a clip that runs steadily at the header's rate for its first frames and changes
    rate only later is measured through OpenCV's time-based seek, so it looks constant-rate and
    its count follows the header's rate.
    Raises :class:`VideoError` for a missing/empty/non-video/undecodable file.
    """
    import cv2

    p = _check_file(path)
    cap = _open(p)
    try:
        header = _Header(cap.get(cv2.CAP_PROP_FPS), cap.get(cv2.CAP_PROP_FRAME_COUNT))
        codec = _fourcc(cap.get(cv2.CAP_PROP_FOURCC))
        rotation = _meta_rotation(cap)
        shape, times, ended = _decode_prefix(cap)
        if shape is None:
            raise _no_frames_error(p, codec)
        decoded = _count_frames(cap, header, times, ended, shape)
    finally:
        cap.release()
    tl = _reconcile(header, decoded)
    stored_wh = (int(shape[1]), int(shape[0]))
    w, h = stored_wh[::-1] if rotation in (90, 270) else stored_wh
    info = VideoInfo(
        path=str(p), duration_s=tl.duration_s, fps=tl.fps, frame_count=tl.frame_count,
        width=w, height=h, codec=codec, rotation=rotation, container=p.suffix.lower().lstrip("."),
        header_fps=float(header.fps) if math.isfinite(header.fps) else 0.0,
        header_frame_count=int(header.frame_count) if _plausible_count(header.frame_count) else 0,
        variable_fps=tl.variable, stored_wh=stored_wh, warnings=tl.warnings)
    for warning in tl.warnings:
        log.warning("%s: %s", p.name, warning)
    return info


def _decode_prefix(cap: Any) -> tuple[tuple[int, ...] | None, list[float], bool]:
    """Decode up to PROBE_PREFIX_FRAMES frames: (first frame shape, times ms, stream ended)."""
    import cv2

    if not cap.grab():
        return None, [], True
    ok, img = cap.retrieve()
    if not ok or img is None or img.size == 0:
        return None, [], True
    times = [cap.get(cv2.CAP_PROP_POS_MSEC)]
    while len(times) < PROBE_PREFIX_FRAMES:
        if not cap.grab():
            return img.shape, times, True
        times.append(cap.get(cv2.CAP_PROP_POS_MSEC))
    return img.shape, times, False


def _steady(times_ms: list[float] | tuple[float, ...]) -> bool | None:
    """True: constant intervals; False: varying (VFR); None: timestamps unusable."""
    if len(times_ms) < 2:
        return None
    steps = np.diff(np.asarray(times_ms, dtype=np.float64))
    if not np.all(steps > 0):
        return None
    med = float(np.median(steps))
    return bool(np.all(np.abs(steps - med) <= max(1.5, 0.1 * med)))


def _agrees(header_fps: float, measured_fps: float) -> bool:
    return (math.isfinite(header_fps) and header_fps > 0
            and abs(header_fps - measured_fps) <= FPS_TOLERANCE * measured_fps)


def _seekable(header: _Header, times: list[float]) -> bool:
    """OpenCV maps frame numbers to times with the header fps: seeking by frame number is
    only meaningful when the first frames are steady at that rate."""
    if not _steady(times):
        return False
    return _agrees(header.fps, (len(times) - 1) * 1000.0 / (times[-1] - times[0]))


def _count_frames(cap: Any, header: _Header, times: list[float], ended: bool,
                  shape: tuple[int, ...]) -> _Decoded:
    """Verify/establish the frame count after the prefix (see :func:`probe`, step 3)."""
    import cv2

    n = len(times)
    last_ms: float | None = times[-1]
    if ended:
        return _Decoded(tuple(times), n, True, last_ms)
    if _plausible_count(header.frame_count) and _seekable(header, times):
        claimed = int(round(header.frame_count))
        tail = _tail_count(cap, claimed, times) if claimed - PROBE_TAIL_FRAMES > n else None
        if tail is not None and tail.exact:
            return tail
        if tail is not None:  # the clip runs on past the claimed end: keep counting
            n, last_ms = tail.frame_count, tail.last_ms
    limit = max(PROBE_MIN_COUNT_FRAMES, PROBE_COUNT_PIXELS // max(1, shape[0] * shape[1]))
    while n < limit:
        if not cap.grab():
            return _Decoded(tuple(times), n, True, last_ms)
        n += 1
        last_ms = cap.get(cv2.CAP_PROP_POS_MSEC)
    if _plausible_count(header.frame_count) and header.frame_count > n:
        return _Decoded(tuple(times), int(round(header.frame_count)), False, None, n)
    return _Decoded(tuple(times), n, False, last_ms, n)


def _tail_count(cap: Any, claimed: int, times: list[float]) -> _Decoded | None:
    """Seek near the claimed end and decode to the real end; None when the seek cannot be
    trusted. Decoding stops ``10 × PROBE_TAIL_FRAMES`` past the claim (count inexact)."""
    import cv2

    target = claimed - PROBE_TAIL_FRAMES
    cap.set(cv2.CAP_PROP_POS_FRAMES, target)
    landed = int(round(cap.get(cv2.CAP_PROP_POS_FRAMES)))
    if landed > target or landed < len(times):
        return None
    n, last, limit = landed, None, claimed + 10 * PROBE_TAIL_FRAMES
    while n < limit and cap.grab():
        n += 1
        last = cap.get(cv2.CAP_PROP_POS_MSEC)
    if n == landed:
        return _Decoded(tuple(times), _bisect_end(cap, len(times) - 1, landed))
    return _Decoded(tuple(times), n, n < limit, last, n)


def _decodes_at(cap: Any, index: int) -> bool:
    import cv2

    cap.set(cv2.CAP_PROP_POS_FRAMES, index)
    return int(round(cap.get(cv2.CAP_PROP_POS_FRAMES))) == index and bool(cap.grab())


def _bisect_end(cap: Any, good: int, bad: int) -> int:
    """Frame count when frame ``good`` decodes and frame ``bad`` does not (log₂ seeks)."""
    if bad - good > 1 and _decodes_at(cap, bad - 1):
        return bad
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if _decodes_at(cap, mid) else (good, mid)
    return good + 1


def _reconcile(header: _Header, dec: _Decoded) -> _Timeline:
    """Decide fps, frame count, duration and VFR from the header and what decoded. Pure."""
    warnings: list[str] = []
    fps, variable = _reconcile_fps(header, dec, warnings)
    count = dec.frame_count
    if not dec.exact:
        rest = (f"using the header's {count}, unverified" if count > dec.counted else
                "frames after that are not analysed")
        warnings.append(f"frame counting stopped after {dec.counted} frames (probe limit); "
                        + rest)
    elif not _plausible_count(header.frame_count):
        warnings.append(f"the header's frame count ({header.frame_count:g}) is invalid; "
                        f"counted {count} frames by decoding")
    elif int(round(header.frame_count)) != count:
        claimed = int(round(header.frame_count))
        why = " (the file may be truncated)" if count < claimed else ""
        warnings.append(f"the header claims {claimed} frames but {count} decode{why}; "
                        f"using {count}")
    return _Timeline(fps, count, count / fps, variable, tuple(warnings))


def _reconcile_fps(header: _Header, dec: _Decoded, warnings: list[str]) -> tuple[float, bool]:
    times = dec.times_ms
    steady = _steady(times)
    header_ok = _plausible_fps(header.fps)
    if steady is None:
        fps = header.fps if header_ok else FALLBACK_FPS
        source = "the header's" if header_ok else "an assumed"
        warnings.append(f"frames carry no usable timestamps; using {source} {fps:g} fps, "
                        "unverified (times in the result may be off)")
        return fps, False
    whole = _average_fps(times[0], dec)
    if not steady:
        fps = whole or (len(times) - 1) * 1000.0 / (times[-1] - times[0])
        steps = np.diff(np.asarray(times))
        warnings.append(f"variable frame rate (frame intervals {steps.min():.0f}–"
                        f"{steps.max():.0f} ms); using the average {fps:.3f} fps, so frame "
                        "times are approximate")
        return fps, True
    measured = (len(times) - 1) * 1000.0 / (times[-1] - times[0])  # mean: ms rounding cancels
    if _agrees(header.fps, measured):  # e.g. 480 fps slow motion: corroborated, not absurd
        fps = float(header.fps)
    elif not header_ok:
        warnings.append(f"the header's frame rate ({header.fps:g}) is invalid; measured "
                        f"{measured:.3f} fps from frame timestamps")
        fps = measured
    else:
        warnings.append(f"the header says {header.fps:.3f} fps but frame timestamps show "
                        f"{measured:.3f} fps; using {measured:.3f}")
        fps = measured
    if whole and abs(whole - fps) > 2 * FPS_TOLERANCE * fps:
        warnings.append(f"frame timing drifts later in the clip (average {whole:.3f} fps vs "
                        f"{fps:.3f} at the start); treating it as variable frame rate")
        return whole, True
    return fps, False


def _average_fps(t0_ms: float, dec: _Decoded) -> float | None:
    """Average fps over the whole clip when the last frame's time is known."""
    if dec.last_ms is None or dec.frame_count < 2 or dec.last_ms <= t0_ms:
        return None
    return (dec.frame_count - 1) * 1000.0 / (dec.last_ms - t0_ms)


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

    def close(self) -> None:
        self.cap.release()

    def _timing_ok(self, index: int) -> bool:
        import cv2

        ms = self.cap.get(cv2.CAP_PROP_POS_MSEC)
        if self.t0 is None:
            self.t0 = ms - index * self.step_ms
        return abs(ms - (self.t0 + index * self.step_ms)) <= 0.5 * self.step_ms

    def grab(self) -> bool:
        if not self.cap.grab():
            return False
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
        w, h = size_wh[::-1] if rotation in (90, 270) else size_wh
        if bgr.shape[1] != w or bgr.shape[0] != h:
            bgr = cv2.resize(bgr, (int(w), int(h)), interpolation=cv2.INTER_AREA)
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    turn = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180,
            270: cv2.ROTATE_90_COUNTERCLOCKWISE}.get(rotation)
    return rgb if turn is None else cv2.rotate(rgb, turn)


def read_frames(path: str | Path, frame_indices: Iterable[int],
                size_wh: tuple[int, int] | None = None, *, rotation: int | None = None,
                on_progress: ProgressFn | None = None, cancel: threading.Event | None = None,
                allow_seek: bool = True) -> tuple[np.ndarray, tuple[int, ...]]:
    """Decode the frames at ``frame_indices`` (strictly increasing) as a T×H×W×3 uint8 RGB
    array, upright, resized with INTER_AREA to ``size_wh`` = (w, h) when given.

    Sequential grab()/retrieve() (only wanted frames are converted); long gaps may seek (see
    :class:`_Cursor`; pass ``allow_seek=False`` for clips probed as VFR). ``rotation`` None
    uses the file's rotation metadata; an int (clockwise degrees) overrides it. Frames missing
    at the end (the header over-promised) are dropped with a logged warning; returns
    (frames, indices actually read). None read → VideoError. ``cancel`` (threading.Event) is
    checked between frames → JobCancelled.
    """
    wanted = _check_indices(frame_indices)
    if not wanted:
        raise ValueError("no frame indices given")
    p = _check_file(path)
    cursor = _Cursor(p, allow_seek, cancel)
    rot = _meta_rotation(cursor.cap) if rotation is None else int(rotation) % 360
    frames: list[np.ndarray] = []
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
            if on_progress is not None:
                on_progress(done + 1, len(wanted))
    finally:
        cursor.close()
    if not frames and cursor.next == 0:
        raise _no_frames_error(p, "")
    if not frames:
        raise VideoError(f"{p.name} has {cursor.next} decodable frames; none of the requested "
                         f"frames (from index {wanted[0]}) exist",
                         hint="probe the file again: it may be truncated or have changed")
    if len(frames) < len(wanted):
        log.warning("%s: only %d of %d planned frames decode (the clip ends at frame %d, "
                    "before index %d)", p.name, len(frames), len(wanted), cursor.next - 1,
                    wanted[len(frames)])
    return np.stack(frames), wanted[: len(frames)]


def iter_frames(path: str | Path, *, size_wh: tuple[int, int] | None = None,
                rotation: int | None = None, fps: float | None = None
                ) -> Iterator[tuple[int, float, np.ndarray]]:
    """Every frame in order as (index, t_s, RGB upright frame). ``t_s`` is index / ``fps`` when
    ``fps`` is given (matches a plan's timestamps); else the frame's presentation time from the
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
            t_prev = t_s
            yield index, t_s, _to_rgb(bgr, size_wh, rot)
            index += 1
    finally:
        cap.release()
