"""Scene cuts from the decoded low-resolution stream (colour histograms + a tiny thumbnail).

Each examined frame becomes a feature: per-channel 16-bin colour histograms of a 64×36
version (what is in the picture) and an 8×8 grey thumbnail (where it is). Two frames' distance
is the mean of the histograms' total-variation distance and the thumbnails' mean absolute
difference, both in 0..1. A cut is a frame whose distance to the frame before is above the
threshold and the largest within ± ``PEAK_RADIUS`` examined frames (a dissolve counts once).

Modes (``LongVideoSettings.cuts``): ``scene`` examines every frame (cuts exact to the frame),
``keyframes`` only the keyframes (the decoder skips the rest: cheap on hours of video; a
cut lands on the first keyframe after it — where encoders put one at a scene change),
``fixed`` examines nothing, and ``auto`` picks ``scene`` while the clip's decoded pixels stay
within the settings' budget, else ``keyframes``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from chord_core.longvideo.settings import LongVideoSettings
from chord_core.longvideo.stream import stream_frames
from chord_core.types import VideoInfo

log = logging.getLogger(__name__)

SCAN_WH = (64, 36)
BINS = 16
PEAK_RADIUS = 2


@dataclass(frozen=True)
class Cut:
    """A scene change: the first frame of the new scene, its container time, the strength."""

    frame_index: int
    t_s: float
    strength: float

    def to_dict(self) -> dict:
        return {"frame_index": self.frame_index, "t_s": self.t_s,
                "strength": round(self.strength, 4)}


@dataclass(frozen=True)
class CutScan:
    """What a scan found, how (``mode``), over how many frames, in how long."""

    mode: str
    cuts: tuple[Cut, ...]
    frames_examined: int = 0
    seconds: float = 0.0
    reason: str = ""

    def to_dict(self) -> dict:
        return {"mode": self.mode, "reason": self.reason, "frames_examined": self.frames_examined,
                "seconds": round(self.seconds, 3), "cuts": [c.to_dict() for c in self.cuts]}


def feature(rgb: np.ndarray) -> np.ndarray:
    """Histograms (3 × BINS, each summing to 1) followed by an 8×8 grey thumbnail in 0..1."""
    pixels = rgb.reshape(-1, 3)
    hist = [np.bincount(pixels[:, c] >> 4, minlength=BINS) / len(pixels) for c in range(3)]
    grey = rgb.astype(np.float32).mean(axis=2)
    h, w = grey.shape
    thumb = grey[: h // 8 * 8, : w // 8 * 8].reshape(8, h // 8, 8, w // 8).mean(axis=(1, 3))
    return np.concatenate(hist + [thumb.ravel() / 255.0]).astype(np.float32)


def distance(a: np.ndarray, b: np.ndarray) -> float:
    """0 (same picture) … 1 (nothing alike)."""
    n = 3 * BINS
    hist = float(np.abs(a[:n] - b[:n]).sum()) / 6.0  # total variation, averaged over channels
    thumb = float(np.abs(a[n:] - b[n:]).mean())
    return min(1.0, 0.5 * hist + 0.5 * min(1.0, 2.0 * thumb))


def choose_mode(info: VideoInfo, settings: LongVideoSettings) -> tuple[str, str]:
    """(mode, why) for ``settings.cuts`` on this clip."""
    if settings.cuts != "auto":
        return settings.cuts, f"{settings.cuts} (asked for)"
    if info.container == "image" or info.frame_count < 2:
        return "fixed", "fixed (a single frame)"
    pixels = float(info.frame_count) * info.width * info.height
    if pixels <= settings.scan_budget_px:
        return "scene", (f"scene: every frame examined ({pixels / 1e9:.1f} G decoded pixels "
                         f"≤ budget {settings.scan_budget_px / 1e9:.0f} G)")
    return "keyframes", (f"keyframes: decoding every frame would be {pixels / 1e9:.0f} G "
                         f"pixels (budget {settings.scan_budget_px / 1e9:.0f} G)")


def find_cuts(info: VideoInfo, settings: LongVideoSettings, *,
              cancel: threading.Event | None = None) -> CutScan:
    """Scan the clip for scene cuts in the mode the settings choose (see module docstring)."""
    mode, why = choose_mode(info, settings)
    if mode == "fixed":
        return CutScan("fixed", (), reason=why)
    t0 = time.perf_counter()
    dists: list[tuple[int, float]] = []  # (frame index, distance to the frame examined before)
    prev: np.ndarray | None = None
    examined = 0
    frames = keyframe_frames(info, cancel) if mode == "keyframes" else None
    if frames is None:
        frames = stream_frames(info, SCAN_WH, keyframes_only=mode == "keyframes",
                               cancel=cancel)
    for index, _t, rgb in frames:
        feat = feature(rgb)
        examined += 1
        if prev is not None and (not dists or index > dists[-1][0]):
            dists.append((index, distance(prev, feat)))
        prev = feat
    cuts = _peaks(dists, settings.cut_threshold)
    seconds = time.perf_counter() - t0
    log.info("%s: %d cut(s) in %d frames examined (%s) in %.1f s", info.path, len(cuts),
             examined, mode, seconds)
    return CutScan(mode, tuple(Cut(i, info.time_of(i), d) for i, d in cuts), examined,
                   seconds, why)


SCAN_BATCH = 256  # keyframes per read of the index-driven scan
SCAN_QUEUE = 2  # batches decoded ahead (2 × 256 × 64×36×3 bytes ≈ 3.5 MB)


def keyframe_frames(info: VideoInfo, cancel: threading.Event | None = None
                    ) -> Iterator[tuple[int, float, np.ndarray]] | None:
    """The keyframes, found in the packet index (demux only), decoded one each through the
    reader chain (NVDEC by index, or the CPU pool: a seek and one frame per keyframe) in
    batches, read ahead in a thread through a bounded queue; None when the file has no
    usable index (the caller then decodes with ``skip_frame``)."""
    from chord_core.media.readers import ReaderUnavailable, usable_index

    try:
        index = usable_index(info)
    except ReaderUnavailable as why:
        log.info("%s: keyframe scan without the packet index (%s)", info.path, why)
        return None
    keys = [k for k in index.keyframes if k < info.frame_count]
    return _batches_ahead(info, keys, cancel)


def _batches_ahead(info: VideoInfo, keys: list[int], cancel: threading.Event | None
                   ) -> Iterator[tuple[int, float, np.ndarray]]:
    import queue

    from chord_core.media.readers import ReadRequest, read_frames_auto

    q: queue.Queue = queue.Queue(maxsize=SCAN_QUEUE)
    stop = threading.Event()

    def put(item: object) -> None:  # a put blocked when the consumer stops: freed below
        if not stop.is_set():
            q.put(item)

    def produce() -> None:
        try:
            for s in range(0, len(keys), SCAN_BATCH):
                got = read_frames_auto(ReadRequest(info, tuple(keys[s:s + SCAN_BATCH]),
                                                   SCAN_WH, cancel=cancel))
                put(got)
                if stop.is_set() or got.stopped_at is not None:
                    break
            put(None)
        except BaseException as exc:  # noqa: BLE001 — re-raised by the consumer
            put(exc)

    worker = threading.Thread(target=produce, name="chord-keyframe-scan", daemon=True)
    worker.start()
    try:
        while True:
            got = q.get()
            if got is None:
                return
            if isinstance(got, BaseException):
                raise got
            for k, t, rgb in zip(got.indices, got.times_s, got.frames):
                yield k, t, rgb
    finally:
        stop.set()
        try:  # free a put blocked on the full queue: the producer's next put sees stop
            while True:
                q.get_nowait()
        except queue.Empty:
            pass


def _peaks(dists: list[tuple[int, float]], threshold: float) -> list[tuple[int, float]]:
    """Distances above ``threshold`` that are the largest within ± PEAK_RADIUS entries."""
    out = []
    values = [d for _, d in dists]
    for k, (index, d) in enumerate(dists):
        if d < threshold or index <= 0:
            continue
        near = values[max(0, k - PEAK_RADIUS): k + PEAK_RADIUS + 1]
        if d >= max(near) and not (out and values[k - 1] == d and out[-1][0] == dists[k - 1][0]):
            out.append((index, d))
    return out
