"""Probe a video file with OpenCV (FFmpeg backend): what it really is, as a :class:`VideoInfo`.

Headers lie, so every number is cross-checked by decoding a bounded amount whatever the clip
length (strategy in :func:`probe`'s docstring; :func:`_reconcile` turns each correction of the
header into one warning). The low-level capture helpers (:func:`_check_file`, :func:`_open`,
:func:`_meta_rotation`, :func:`_no_frames_error`) live here too and are shared with
:mod:`chord_core.media.video`, which reads frames.
"""

from __future__ import annotations

import logging
import math
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chord_core.errors import VideoError
from chord_core.media.confined import source
from chord_core.media.video_files import check_container, check_video_file
from chord_core.types import VideoInfo

__all__ = ["probe"]

log = logging.getLogger(__name__)

MAX_PLAUSIBLE_FPS = 240.0
FALLBACK_FPS = 25.0  # FFmpeg's own guess when a stream carries no timing at all
PROBE_PREFIX_FRAMES = 48  # decoded at the start to measure the real frame interval
PROBE_TAIL_FRAMES = 24  # decoded at the end to verify the header's frame count
PROBE_COUNT_PIXELS = 15_000_000_000  # cap on pixels decoded when counting frame by frame
PROBE_MIN_COUNT_FRAMES = 2_000
FPS_TOLERANCE = 0.01  # header vs measured fps: relative disagreement that is corrected


# -- files and captures ------------------------------------------------------------------

def _check_file(path: str | Path) -> Path:
    """The path if it may be a video (:func:`chord_core.media.video_files.check_video_file`)."""
    return check_video_file(path)


def _open(p: Path) -> Any:
    """A cv2.VideoCapture on ``p`` with OpenCV's auto-rotation switched off."""
    import cv2

    with source(p) as src:
        cap = cv2.VideoCapture(src, cv2.CAP_FFMPEG)
    if not cap.isOpened():
        cap.release()
        raise VideoError(
            f"cannot open {p.name}: not a video, or its container is damaged or unsupported",
            hint="check that it plays in a video player; if it was cut short (interrupted "
                 "download or copy) get the complete file; else re-encode it, e.g. "
                 "`ffmpeg -i in.ext -c:v libx264 out.mp4`")
    cap.set(cv2.CAP_PROP_ORIENTATION_AUTO, 0)
    return cap


def rotated_wh(wh: tuple[int, int], rotation: int) -> tuple[int, int]:
    """(w, h) seen the other way round after a quarter turn: stored ↔ displayed size."""
    return (wh[1], wh[0]) if rotation in (90, 270) else (wh[0], wh[1])


def upright(rgb: np.ndarray, rotation: int) -> np.ndarray:
    """A decoded frame (stored orientation) turned ``rotation`` degrees clockwise, contiguous."""
    import cv2

    turn = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180,
            270: cv2.ROTATE_90_COUNTERCLOCKWISE}.get(rotation)
    return np.ascontiguousarray(rgb) if turn is None else cv2.rotate(rgb, turn)


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
    all_ms: tuple[float, ...] = ()  # every frame's time, when all were decoded in order


@dataclass(frozen=True)
class _Timeline:
    fps: float
    frame_count: int
    duration_s: float
    variable: bool
    warnings: tuple[str, ...]
    count_warnings: tuple[str, ...] = ()  # the part of ``warnings`` about the frame count
    runs: tuple[tuple[int, float, float], ...] = ()  # VideoInfo.timeline


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
       in ``warnings``;
    5. every frame's own presentation time from the container (PyAV demux, no decoding;
       :func:`chord_core.media.frame_times.container_timeline`), checked against the decoded
       prefix, replaces the measured rate: ``VideoInfo.timeline``, and warnings that say in
       seconds how far jumps, backward times, variable rate or a lying header would
       misplace frames. Without PyAV (or usable timestamps) times stay index / fps.
    Limitation (without step 5): a clip that runs steadily at the header's rate for its
    first frames and changes rate only later is measured through OpenCV's time-based seek,
    so it looks constant-rate and its count follows the header's rate.
    Raises :class:`VideoError` for a missing/empty/non-video/undecodable file.
    """
    import cv2

    p = _check_file(path)
    check_container(p)
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
    tl = _with_container_times(p, _reconcile(header, decoded), header.fps, decoded)
    stored_wh = (int(shape[1]), int(shape[0]))
    w, h = rotated_wh(stored_wh, rotation)
    info = VideoInfo(
        path=str(p), duration_s=tl.duration_s, fps=tl.fps, frame_count=tl.frame_count,
        width=w, height=h, codec=codec, rotation=rotation, container=p.suffix.lower().lstrip("."),
        header_fps=float(header.fps) if math.isfinite(header.fps) else 0.0,
        header_frame_count=int(header.frame_count) if _plausible_count(header.frame_count) else 0,
        variable_fps=tl.variable, stored_wh=stored_wh, warnings=tl.warnings, timeline=tl.runs)
    for warning in tl.warnings:
        log.warning("%s: %s", p.name, warning)
    return info


def _with_container_times(p: Path, tl: _Timeline, header_fps: float,
                          decoded: _Decoded) -> _Timeline:
    """Every frame's own presentation time instead of the rate OpenCV measured on the first
    frames, when the container has them (:func:`chord_core.media.frame_times.container_timeline`;
    without PyAV, the times of every decoded frame when the probe decoded them all)."""
    from chord_core.media.frame_times import container_timeline

    got = container_timeline(p, tl.frame_count,
                             header_fps if math.isfinite(header_fps) else 0.0,
                             decoded.times_ms, decoded.all_ms)
    if got is None:
        return tl
    fps, counted = got.fps or tl.fps, tl.count_warnings
    if got.irregular:  # a header count from duration × a wrong rate means nothing
        counted = tuple(w for w in counted if not w.startswith("the header claims"))
    return _Timeline(fps, tl.frame_count, tl.frame_count / fps, got.variable,
                     got.warnings + counted, counted, got.runs)


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
        return _Decoded(tuple(times), n, True, last_ms, all_ms=tuple(times))
    if _plausible_count(header.frame_count) and _seekable(header, times):
        claimed = int(round(header.frame_count))
        tail = _tail_count(cap, claimed, times) if claimed - PROBE_TAIL_FRAMES > n else None
        if tail is not None and tail.exact:
            return tail
        if tail is not None:  # the clip runs on past the claimed end: keep counting
            n, last_ms = tail.frame_count, tail.last_ms
    limit = max(PROBE_MIN_COUNT_FRAMES, PROBE_COUNT_PIXELS // max(1, shape[0] * shape[1]))
    every = array("d", times) if n == len(times) else None  # in order from frame 0
    while n < limit:
        if not cap.grab():
            return _Decoded(tuple(times), n, True, last_ms,
                            all_ms=tuple(every) if every is not None else ())
        n += 1
        last_ms = cap.get(cv2.CAP_PROP_POS_MSEC)
        if every is not None:
            every.append(last_ms)
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
    if not cap.grab():
        return _Decoded(tuple(times), _bisect_end(cap, len(times) - 1, landed))
    # OpenCV reports the frame it was asked for but can stand one frame before it (seen on
    # clips whose packets were re-timed, e.g. a segment looped by remuxing): the count would
    # then come out one high. The landed frame's time says which frame it really is (the
    # prefix is steady at the header's rate, or we would not have seeked).
    last = cap.get(cv2.CAP_PROP_POS_MSEC)
    at = int(round((last - times[0]) * (len(times) - 1) / (times[-1] - times[0])))
    if abs(at - landed) > 1:
        return None
    n, limit = at + 1, claimed + 10 * PROBE_TAIL_FRAMES
    while n < limit and cap.grab():
        n += 1
        last = cap.get(cv2.CAP_PROP_POS_MSEC)
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
    n_fps = len(warnings)
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
    return _Timeline(fps, count, count / fps, variable, tuple(warnings),
                     tuple(warnings[n_fps:]))


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

