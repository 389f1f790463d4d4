"""Draw results: box overlays, timeline data, CSV, and the annotated MP4.

``Overlay`` is configured once (like supervision's annotators) and applied per frame:
``draw(image_rgb, detections)`` returns a NEW RGB image, the input stays untouched. Boxes come
from the normalised ``bbox`` scaled to the image's own size, so any resolution works.
Colours are per track id and stable (``track_color``), so the UI timeline can match them.

Colour order: images are RGB everywhere in Chord; supervision's annotators hand OpenCV
``Color.as_bgr()``. We give supervision a palette with red and blue swapped, so what lands in
our RGB pixels is exactly ``track_color(track_id)``.

The annotated video is H.264 (yuv420p, even size, ``+faststart``) via PyAV, which browsers
play; when PyAV or an H.264 encoder is missing it falls back to OpenCV ``mp4v`` (plays in
desktop players, not in most browsers) and logs which one it used.
"""

from __future__ import annotations

import csv
import io
import logging
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

from chord_core.analysis.grounding import denormalise
from chord_core.analysis.tracking import BoxTimeline, default_max_gap
from chord_core.errors import JobCancelled, VideoError
from chord_core.types import Detection, Result, VideoInfo

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

BANNER_TEXT = "test model — random weights"
# Distinct, saturated colours (RGB) for track ids 1, 2, …; id < 1 (unlinked) is grey.
PALETTE_RGB: tuple[tuple[int, int, int], ...] = (
    (230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 190), (0, 128, 128),
    (170, 110, 40), (128, 0, 0), (255, 225, 25), (0, 0, 128),
)
UNTRACKED_RGB = (128, 128, 128)
TEXT_RGB = (255, 255, 255)
TIME_BG_RGB = (0, 0, 0)
BANNER_BG_RGB = (190, 0, 0)


def track_color(track_id: int) -> tuple[int, int, int]:
    """Stable RGB colour of a track id (ids < 1 — unlinked detections — are grey)."""
    if track_id < 1:
        return UNTRACKED_RGB
    return PALETTE_RGB[(track_id - 1) % len(PALETTE_RGB)]


def track_color_hex(track_id: int) -> str:
    r, g, b = track_color(track_id)
    return f"#{r:02x}{g:02x}{b:02x}"


def _ascii(text: str) -> str:
    """OpenCV's Hershey fonts draw ASCII only: map dashes, replace the rest with '?'."""
    text = text.replace("—", "-").replace("–", "-")
    return text.encode("ascii", "replace").decode("ascii")


class Overlay:
    """Boxes + "#track label" + timestamp + optional test-model banner, drawn on a copy.

    ``thickness``/``text_scale`` None = chosen from the image size at draw time.
    """

    def __init__(self, *, thickness: int | None = None, text_scale: float | None = None) -> None:
        self.thickness = thickness
        self.text_scale = text_scale
        self._annotators: dict[tuple[int, float], tuple[Any, Any]] = {}

    def _sizes(self, wh: tuple[int, int]) -> tuple[int, float]:
        short = min(wh)
        thickness = self.thickness or max(2, round(short / 240))
        scale = self.text_scale or max(0.4, round(short / 900, 2))
        return thickness, scale

    def _get_annotators(self, thickness: int, scale: float) -> tuple[Any, Any]:
        """supervision annotators for one size, made once (palette channel-swapped, see top)."""
        key = (thickness, scale)
        if key not in self._annotators:
            import supervision as sv

            swapped = [sv.Color(r=b, g=g, b=r) for r, g, b in (*PALETTE_RGB, UNTRACKED_RGB)]
            palette = sv.ColorPalette(colors=swapped)
            box = sv.BoxAnnotator(color=palette, thickness=thickness)
            label = sv.LabelAnnotator(color=palette, text_color=sv.Color(*TEXT_RGB),
                                      text_scale=scale, text_thickness=max(1, thickness // 2),
                                      text_padding=max(2, thickness * 2))
            self._annotators[key] = (box, label)
        return self._annotators[key]

    def draw(self, image_rgb: np.ndarray, detections: Sequence[Detection], *,
             t_s: float | None = None, label_prefix: str = "", test_model: bool = False
             ) -> np.ndarray:
        """A new RGB image with ``detections`` drawn; ``image_rgb`` is not modified."""
        import numpy as np

        if image_rgb.ndim != 3 or image_rgb.shape[2] != 3 or image_rgb.dtype != np.uint8:
            raise ValueError(f"expected an RGB uint8 H×W×3 image, got {image_rgb.dtype} "
                             f"{image_rgb.shape}")
        out = np.ascontiguousarray(image_rgb).copy()
        h, w = out.shape[:2]
        thickness, scale = self._sizes((w, h))
        if detections:
            self._draw_boxes(out, detections, thickness, scale, label_prefix)
        if t_s is not None:
            _corner_text(out, f"t = {t_s:.2f} s", scale, thickness, TIME_BG_RGB, bottom=True)
        if test_model:
            _banner(out, BANNER_TEXT, scale, thickness)
        return out

    def _draw_boxes(self, out: np.ndarray, detections: Sequence[Detection], thickness: int,
                    scale: float, label_prefix: str) -> None:
        import numpy as np
        import supervision as sv

        h, w = out.shape[:2]
        xyxy = np.array([denormalise(d.bbox, (w, h)) for d in detections], dtype=float)
        ids = np.array([d.track_id for d in detections], dtype=int)
        n = len(PALETTE_RGB)
        lookup = np.where(ids >= 1, (ids - 1) % n, n).astype(np.int64)  # n = grey slot
        labels = [_ascii(f"{label_prefix}{_tag(d)}".strip()) for d in detections]
        sv_dets = sv.Detections(xyxy=xyxy, tracker_id=ids)
        box, label = self._get_annotators(thickness, scale)
        box.annotate(out, sv_dets, custom_color_lookup=lookup)
        label.annotate(out, sv_dets, labels=labels, custom_color_lookup=lookup)


def _tag(det: Detection) -> str:
    return f"#{det.track_id} {det.label}" if det.track_id >= 1 else det.label


def _corner_text(img: np.ndarray, text: str, scale: float, thickness: int,
                 bg: tuple[int, int, int], *, bottom: bool) -> None:
    """White text on a filled box in the bottom-left (or top-left) corner, in place."""
    import cv2

    weight = max(1, thickness // 2)
    (tw, th), base = cv2.getTextSize(_ascii(text), cv2.FONT_HERSHEY_SIMPLEX, scale, weight)
    pad = max(3, thickness * 2)
    h = img.shape[0]
    y2 = h if bottom else th + base + 2 * pad
    y1 = y2 - (th + base + 2 * pad)
    cv2.rectangle(img, (0, y1), (tw + 2 * pad, y2), bg, thickness=-1)
    cv2.putText(img, _ascii(text), (pad, y2 - pad - base), cv2.FONT_HERSHEY_SIMPLEX, scale,
                TEXT_RGB, weight, cv2.LINE_AA)


def _banner(img: np.ndarray, text: str, scale: float, thickness: int) -> None:
    """A full-width strip across the top saying the output is meaningless, in place."""
    import cv2

    weight = max(1, thickness // 2)
    (tw, th), base = cv2.getTextSize(_ascii(text), cv2.FONT_HERSHEY_SIMPLEX, scale, weight)
    pad = max(3, thickness * 2)
    height = th + base + 2 * pad
    cv2.rectangle(img, (0, 0), (img.shape[1], height), BANNER_BG_RGB, thickness=-1)
    x = max(pad, (img.shape[1] - tw) // 2)
    cv2.putText(img, _ascii(text), (x, height - pad - base), cv2.FONT_HERSHEY_SIMPLEX, scale,
                TEXT_RGB, weight, cv2.LINE_AA)


_DEFAULT_OVERLAY: Overlay | None = None


def _overlay() -> Overlay:
    global _DEFAULT_OVERLAY
    if _DEFAULT_OVERLAY is None:
        _DEFAULT_OVERLAY = Overlay()
    return _DEFAULT_OVERLAY


# ── result-level helpers ─────────────────────────────────────────────────────────────────────

def result_max_gap(result: Result) -> float:
    """The engine's linking gap for ``result``: 1.5 sampling intervals."""
    fps = result.sampling.fps
    if fps > 0:
        return default_max_gap(1.0 / fps)
    times = sorted(result.sampling.timestamps_s)
    steps = [b - a for a, b in zip(times, times[1:]) if b > a]
    return default_max_gap(sorted(steps)[len(steps) // 2] if steps else 1.0)


def result_timeline(result: Result) -> BoxTimeline:
    """Boxes of ``result`` at any time; snaps to a detection within half a video frame."""
    snap = 0.5 / result.video.fps if result.video.fps > 0 else 1e-3
    return BoxTimeline(result.detections, max_gap_s=result_max_gap(result), snap_s=snap)


def frame_with_boxes(frame_rgb: np.ndarray, result: Result, t_s: float) -> np.ndarray:
    """``frame_rgb`` (shown at time ``t_s``) with the result's boxes at that time — for the
    UI scrubber. For many frames build ``result_timeline`` once instead."""
    boxes = result_timeline(result).at(t_s)
    return _overlay().draw(frame_rgb, boxes, t_s=t_s, test_model=result.model.test_model)


def detections_csv(result: Result) -> str:
    """CSV of the sampled-frame detections: time, frame, normalised box, pixel box, label,
    track id (one row per detection, in time order)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["t_s", "frame_index", "x1", "y1", "x2", "y2", "px_x1", "px_y1", "px_x2",
                     "px_y2", "label", "track_id"])
    for d in sorted(result.detections, key=lambda d: (d.t_s, d.track_id)):
        writer.writerow([f"{d.t_s:.3f}", d.frame_index, *(f"{c:.6f}" for c in d.bbox),
                         *d.bbox_px, d.label, d.track_id])
    return buf.getvalue()


def timeline_rows(result: Result) -> list[dict[str, Any]]:
    """Plain rows for a timeline figure, all with the same keys:

    ``kind`` ("segment" | "detection"), ``track_id``, ``track`` ("#1 dog"), ``label``,
    ``start_s``, ``end_s`` (equal for a detection), ``t_s`` (detection time; segment midpoint),
    ``frame_index`` (-1 for segments), ``color`` (hex, same as the boxes).
    Segments first (by start), then detections (by time).
    """
    labels = {t.track_id: t.label for t in result.tracks}
    rows = []
    for s in sorted(result.segments, key=lambda s: (s.start_s, s.track_id)):
        label = s.label or labels.get(s.track_id, "")
        rows.append(_row("segment", s.track_id, label, s.start_s, s.end_s, -1))
    for d in sorted(result.detections, key=lambda d: (d.t_s, d.track_id)):
        rows.append(_row("detection", d.track_id, d.label, d.t_s, d.t_s, d.frame_index))
    return rows


def _row(kind: str, track_id: int, label: str, start: float, end: float,
         frame_index: int) -> dict[str, Any]:
    return {"kind": kind, "track_id": track_id,
            "track": f"#{track_id} {label}".strip() if track_id >= 1 else label,
            "label": label, "start_s": start, "end_s": end, "t_s": (start + end) / 2,
            "frame_index": frame_index, "color": track_color_hex(track_id)}


# ── annotated video ──────────────────────────────────────────────────────────────────────────

class _Writer(Protocol):
    name: str

    def write(self, rgb: np.ndarray) -> None: ...

    def close(self) -> None: ...


class _PyAvWriter:
    """H.264 yuv420p MP4 through PyAV; frames padded to even size by repeating the edge."""

    def __init__(self, path: Path, fps: float, size_wh: tuple[int, int], codec: str) -> None:
        import av

        self.name = f"PyAV {codec} (H.264)"
        self._av = av
        self._container = av.open(str(path), mode="w", options={"movflags": "+faststart"})
        rate = Fraction(fps).limit_denominator(1001)
        self._stream = self._container.add_stream(codec, rate=rate)
        self._stream.width, self._stream.height = (size_wh[0] + size_wh[0] % 2,
                                                   size_wh[1] + size_wh[1] % 2)
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {"crf": "20", "preset": "veryfast"}

    def write(self, rgb: np.ndarray) -> None:
        import numpy as np

        h, w = rgb.shape[:2]
        if w % 2 or h % 2:
            rgb = np.pad(rgb, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
        frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        for packet in self._stream.encode(frame):
            self._container.mux(packet)

    def close(self) -> None:
        try:
            for packet in self._stream.encode():
                self._container.mux(packet)
        finally:
            self._container.close()


class _OpenCvWriter:
    """MPEG-4 part 2 (``mp4v``) through OpenCV: plays in desktop players, not most browsers."""

    def __init__(self, path: Path, fps: float, size_wh: tuple[int, int]) -> None:
        import cv2

        self.name = "OpenCV mp4v"
        self._cv2 = cv2
        self._writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, size_wh)
        if not self._writer.isOpened():
            raise VideoError(f"could not open a video writer for {path}",
                             hint="check the folder is writable and install PyAV (pip install av)")

    def write(self, rgb: np.ndarray) -> None:
        self._writer.write(self._cv2.cvtColor(rgb, self._cv2.COLOR_RGB2BGR))

    def close(self) -> None:
        self._writer.release()


def h264_encoder() -> str | None:
    """Name of a usable PyAV H.264 encoder, or None (PyAV missing or built without one)."""
    try:
        import av
    except ImportError:
        return None
    for name in ("libx264", "libopenh264"):
        try:
            av.codec.Codec(name, "w")
        except (ValueError, av.FFmpegError):
            continue
        return name
    return None


def _open_writer(path: Path, fps: float, size_wh: tuple[int, int]) -> _Writer:
    codec = h264_encoder()
    writer: _Writer
    if codec is not None:
        writer = _PyAvWriter(path, fps, size_wh, codec)
    else:
        log.warning("no H.264 encoder (PyAV with libx264) available: writing mp4v with OpenCV; "
                    "browsers may not play %s — install PyAV (pip install av) to fix", path)
        writer = _OpenCvWriter(path, fps, size_wh)
    log.info("annotated video: %s → %s", writer.name, path)
    return writer


def _read_frames(video_path: str | Path, video: VideoInfo
                 ) -> Iterator[tuple[int, float, np.ndarray]]:
    """Every frame, timed like the sampling plan's timestamps (the probe's container times,
    else index / fps)."""
    from chord_core.media.video import iter_frames

    return iter_frames(video_path, fps=video.fps or None,
                       time_of=video.time_of if video.timeline else None)


def export_annotated_video(video_path: str | Path, result: Result, out_path: str | Path, *,
                           on_progress: Callable[[int, int], None] | None = None,
                           cancel: Any = None, overlay: Overlay | None = None) -> Path:
    """Write ``out_path`` (MP4): every frame of ``video_path`` with the result's boxes,
    interpolated between sampled frames, at the original fps.

    ``on_progress(done, total)`` is called about 100 times; ``cancel`` is anything with
    ``is_set()`` (a ``threading.Event``) — when set, the partial file is removed and
    ``JobCancelled`` raised.
    """
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fps = result.video.fps if result.video.fps > 0 else 25.0
    total = max(0, result.video.frame_count)
    try:
        frames = _read_frames(video_path, result.video)
        done = _render_frames(frames, result, out, fps, total, overlay or Overlay(), on_progress,
                              cancel)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    if done == 0:
        out.unlink(missing_ok=True)
        raise VideoError(f"no frames could be read from {video_path}",
                         hint="check the file plays; re-encode it (e.g. with ffmpeg) if not")
    log.info("annotated video written: %s (%d frames)", out, done)
    return out


def _render_frames(frames: Iterable[tuple[int, float, np.ndarray]], result: Result, out: Path,
                   fps: float, total: int, overlay: Overlay,
                   on_progress: Callable[[int, int], None] | None, cancel: Any) -> int:
    """Draw and encode every frame; returns how many were written."""
    timeline = result_timeline(result)
    step = max(1, total // 100)
    writer: _Writer | None = None
    done = 0
    try:
        for index, t_s, rgb in frames:
            if cancel is not None and cancel.is_set():
                raise JobCancelled("annotated video export was cancelled",
                                   hint="export again when needed")
            if writer is None:
                writer = _open_writer(out, fps, (rgb.shape[1], rgb.shape[0]))
            boxes = timeline.at(t_s, frame_index=index)
            writer.write(overlay.draw(rgb, boxes, t_s=t_s, test_model=result.model.test_model))
            done += 1
            if on_progress is not None and (done % step == 0 or done == total):
                on_progress(done, max(total, done))
    finally:
        if writer is not None:
            writer.close()
    return done
