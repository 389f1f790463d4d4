"""Every frame's presentation time, read from the container — never derived from an average fps.

:func:`read_frame_times` demuxes the first video stream with PyAV (packets only, no decoding;
bounded by ``MAX_PACKETS``) and puts the packets' presentation timestamps in the order the
decoder outputs frames: sorted, within *runs* that a backward jump at a keyframe starts (the
decoder finishes one run before the next, as after concatenated recordings whose clocks
restart). :func:`analyse` turns those ticks into seconds from the first frame, made
monotonic, and says in seconds how unreliable they are: forward jumps, backward jumps,
duplicate times, variable frame rate, a header rate that disagrees. :func:`compact` stores the
times as runs of constant step, ``(first_index, first_time_s, step_s)``, exact to
``TIME_TOLERANCE_S`` (container clocks tick in 1 ms or finer), so a constant-rate clip of any
length is one run; ``VideoInfo.time_of`` reads them back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np

from chord_core.media.confined import source

__all__ = ["FrameTimes", "MAX_PACKETS", "TIME_TOLERANCE_S", "Timeline", "analyse", "compact",
           "container_timeline", "read_frame_times"]

log = logging.getLogger(__name__)

MAX_PACKETS = 400_000  # ≈ 3.7 h at 30 fps; later frames continue at the last run's step
TIME_TOLERANCE_S = 0.001  # a stored time differs from the container's by at most this
JUMP_FACTOR = 10.0  # an interval this many times the usual one is a jump …
JUMP_MIN_S = 0.25  # … when it also loses at least this much time
MAX_LISTED = 3  # jumps named one by one in a warning
DECODED_SLACK_S = 0.0015  # OpenCV reports decoded frames' times in whole milliseconds


@dataclass(frozen=True)
class FrameTimes:
    """Presentation ticks in decoder output order. ``restarts``: indices where a run starts
    with a backward jump. ``complete`` False: demuxing stopped at ``MAX_PACKETS``."""

    ticks: tuple[int, ...]
    time_base: Fraction
    restarts: tuple[int, ...] = ()
    complete: bool = True


@dataclass(frozen=True)
class Timeline:
    """What the probe keeps: ``runs`` for ``VideoInfo.timeline``; ``fps`` the header's rate
    when it fits every frame, else the average (0.0 for a one-frame clip)."""

    runs: tuple[tuple[int, float, float], ...]
    fps: float
    variable: bool
    irregular: bool
    warnings: tuple[str, ...]


def container_timeline(path: Path, frame_count: int, header_fps: float,
                       decoded_ms: tuple[float, ...], all_decoded_ms: tuple[float, ...] = ()
                       ) -> Timeline | None:
    """The timeline of the first ``frame_count`` frames, or None when the container has no
    usable times or they are not those of the frames decoded first (``decoded_ms``, from the
    probe's decoder: guards against packets that are not one frame each). Without PyAV,
    ``all_decoded_ms`` (every frame's time as the probe's decoder reported it, when it
    decoded them all) serves instead."""
    ft = read_frame_times(path)
    if ft is None and len(all_decoded_ms) == frame_count:
        ft = _from_decoded(all_decoded_ms)
    if ft is None or len(ft.ticks) < min(frame_count, 2):
        return None
    if not same_times(ft, decoded_ms):
        log.info("%s: packet times differ from the decoded frames'; not using them", path.name)
        return None
    if frame_count == 1:
        return Timeline(((0, 0.0, 0.0),), 0.0, False, False, ())
    got = analyse(replace(ft, ticks=ft.ticks[:frame_count]), header_fps)
    if got is None:
        return None
    runs, fps = compact(got.times_s), got.fps
    if not (got.variable or got.irregular) and header_fps > 0 \
            and fits_rate(got.times_s, header_fps):
        fps = float(header_fps)  # e.g. 30000/1001 exactly, not a rounded average
        runs = ((0, 0.0, 1.0 / fps),)
    return Timeline(runs, fps, got.variable, got.irregular, got.warnings)


def _from_decoded(ms: tuple[float, ...]) -> FrameTimes | None:
    """Decoded frames' times (ms, output order) as microsecond ticks; a time earlier than the
    one before starts a new run (a restarted clock)."""
    if not ms or not all(np.isfinite(ms)):
        return None
    ticks = tuple(int(round(v * 1000)) for v in ms)
    restarts = tuple(k for k in range(1, len(ticks)) if ticks[k] < ticks[k - 1])
    return FrameTimes(ticks, Fraction(1, 1_000_000), restarts)


def same_times(ft: FrameTimes, decoded_ms: tuple[float, ...]) -> bool:
    """Whether the packets' times, in output order, are those of the first decoded frames."""
    n = min(len(decoded_ms), len(ft.ticks))
    if n < 2 or not all(np.isfinite(decoded_ms[:n])):
        return True  # nothing decoded to compare with: the packets are all there is
    packets = (np.asarray(ft.ticks[:n], dtype=np.float64) - ft.ticks[0]) * float(ft.time_base)
    frames = (np.asarray(decoded_ms[:n], dtype=np.float64) - decoded_ms[0]) / 1000.0
    return bool(np.max(np.abs(packets - frames)) <= DECODED_SLACK_S)


def fits_rate(times_s: tuple[float, ...], fps: float) -> bool:
    """Whether index / ``fps`` reproduces every time within ``TIME_TOLERANCE_S``."""
    t = np.asarray(times_s)
    return bool(np.max(np.abs(t - np.arange(len(t)) / fps)) <= TIME_TOLERANCE_S)


def read_frame_times(path: Path) -> FrameTimes | None:
    """Demux ``path``'s first video stream (no decoding); None when PyAV is missing, the file
    does not open, or a packet carries no timestamp (a raw stream: times are then unknown)."""
    try:
        import av
    except ImportError:
        return None
    try:
        with source(path) as src, av.open(src) as container:
            if not container.streams.video:
                return None
            stream = container.streams.video[0]
            runs, complete = _runs_of_packets(container.demux(stream))
            time_base = Fraction(stream.time_base or 0)
    except (av.error.FFmpegError, OSError) as exc:
        log.info("%s: timestamps not read (%s)", path.name, exc)
        return None
    if runs is None or not time_base:
        return None
    ticks: list[int] = []
    restarts: list[int] = []
    for run in runs:
        if ticks and run:
            restarts.append(len(ticks))
        ticks.extend(sorted(run))
    return FrameTimes(tuple(ticks), time_base, tuple(restarts), complete)


def _runs_of_packets(packets) -> tuple[list[list[int]] | None, bool]:
    """Packet pts grouped into runs; a keyframe at or before the run's latest time starts a
    new run. (None, _) when a packet has no pts."""
    runs: list[list[int]] = [[]]
    top: int | None = None
    count = 0
    for packet in packets:
        if packet.size == 0 or packet.is_discard:
            continue
        if packet.pts is None:
            return None, True
        if packet.is_keyframe and top is not None and packet.pts <= top:
            runs.append([])
            top = None
        runs[-1].append(int(packet.pts))
        top = packet.pts if top is None else max(top, packet.pts)
        count += 1
        if count >= MAX_PACKETS:
            return runs, False
    return runs, True


@dataclass(frozen=True)
class Analysis:
    """Seconds from the first frame (monotonic), what they say about the clip, and the
    warnings (each says how far off times are or would be, in seconds)."""

    times_s: tuple[float, ...]
    fps: float  # average over the clip: (n - 1) / last time
    step_s: float  # the usual (median) frame interval
    variable: bool
    irregular: bool  # jumps, backward times, or a header rate that misplaces frames
    warnings: tuple[str, ...]


def analyse(ft: FrameTimes, header_fps: float = 0.0) -> Analysis | None:
    """Times in seconds plus their warnings; None with fewer than two frames."""
    t = (np.asarray(ft.ticks, dtype=np.float64) - ft.ticks[0]) * float(ft.time_base)
    if len(t) < 2:
        return None
    steps = np.diff(t)
    positive = steps[steps > 0]
    if positive.size == 0:
        return None
    med = float(np.median(positive))
    warnings: list[str] = []
    irregular = _fix_backward(t, ft.restarts, med, warnings)
    steps = np.diff(t)
    if np.any(steps <= 0):
        warnings.append(f"{int(np.sum(steps <= 0))} frame(s) share a timestamp with the frame "
                        "before; they are shown at the same time")
    jumps = np.flatnonzero(steps > max(JUMP_FACTOR * med, med + JUMP_MIN_S))
    if jumps.size:
        irregular = True
        warnings.append(_jump_sentence(t, steps, jumps, med))
    usual = np.delete(steps, jumps)
    usual = usual[usual > 0]
    variable = bool(usual.size and np.any(np.abs(usual - med) > max(0.0015, 0.1 * med)))
    fps = (len(t) - 1) / float(t[-1]) if t[-1] > 0 else 1.0 / med
    if variable:
        warnings.append(f"variable frame rate (frame intervals {usual.min() * 1000:.0f}–"
                        f"{usual.max() * 1000:.0f} ms): each frame keeps its own presentation "
                        f"time (an average {fps:.3f} fps would misplace frames by up to "
                        f"{_worst(t, fps):.2f} s)")
    off = _worst(t, header_fps) if header_fps > 0 else 0.0
    header_wrong = off > 1.5 * med and not (variable or irregular)
    if header_wrong:
        warnings.append(f"the header says {header_fps:g} fps but frame timestamps show "
                        f"{fps:.3f} fps (the header's rate would misplace frames by up to "
                        f"{off:.2f} s); using each frame's own time")
    if not ft.complete:
        warnings.append(f"frame times were read for the first {len(t)} frames (probe "
                        f"limit); later ones continue at {1.0 / med:.3f} fps, unverified")
    return Analysis(tuple(float(v) for v in t), fps, med, variable, irregular or header_wrong,
                    tuple(warnings))


def _worst(t: np.ndarray, fps: float) -> float:
    """How far index / ``fps`` would put a frame from its real time, at worst (seconds)."""
    return float(np.max(np.abs(np.arange(len(t)) / fps - t)))


def _fix_backward(t: np.ndarray, restarts: tuple[int, ...], med: float,
                  warnings: list[str]) -> bool:
    """Shift every run that starts earlier than the frame before it to one usual interval
    after that frame (in place); one warning per backward jump."""
    for k in restarts:
        back = float(t[k - 1] - t[k])
        shift = back + med
        t[k:] += shift
        warnings.append(f"timestamps go back by {back:.1f} s after frame {k - 1} "
                        f"({t[k - 1]:.2f} s); later frames are placed right after it, so "
                        f"their times may be off by {shift:.2f} s")
    return bool(restarts)


def _jump_sentence(t: np.ndarray, steps: np.ndarray, jumps: np.ndarray, med: float) -> str:
    parts = [f"by +{steps[k] - med:.1f} s after frame {k} ({t[k]:.2f} s)"
             for k in jumps[:MAX_LISTED]]
    more = f" and {jumps.size - MAX_LISTED} more" if jumps.size > MAX_LISTED else ""
    return (f"timestamps jump {', '.join(parts)}{more}: no frames in between; each frame "
            "keeps its own time")


def compact(times_s: tuple[float, ...] | np.ndarray, tol: float = TIME_TOLERANCE_S
            ) -> tuple[tuple[int, float, float], ...]:
    """Runs ``(first_index, first_time_s, step_s)`` reproducing every time within ``tol``:
    frame k of a run starting at i is at ``first_time_s + (k - i) · step_s``."""
    t = np.asarray(times_s, dtype=np.float64)
    n, runs, i = len(t), [], 0
    step = 0.0
    while i < n:
        j = _run_end(t, i, tol)
        step = (t[j] - t[i]) / (j - i) if j > i else step
        runs.append((i, round(float(t[i]), 9), round(float(step), 12)))
        i = j + 1
    return tuple(runs)


def _fits(t: np.ndarray, i: int, j: int, tol: float) -> bool:
    step = (t[j] - t[i]) / (j - i)
    line = t[i] + np.arange(j - i + 1) * step
    return bool(np.max(np.abs(t[i:j + 1] - line)) <= tol)


def _run_end(t: np.ndarray, i: int, tol: float) -> int:
    """The last index of the run starting at ``i`` (galloping, then bisecting, over ends
    whose straight line fits every time in between)."""
    n = len(t)
    if i + 1 >= n:
        return i
    good, span = i + 1, 2
    while i + span < n and _fits(t, i, i + span, tol):
        good, span = i + span, span * 2
    bad = min(n, i + span)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if _fits(t, i, mid, tol) else (good, mid)
    return good
