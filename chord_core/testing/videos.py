"""Synthetic test clips made at test time, with known ground truth.

Every frame shows, in its STORED orientation:

* a static background (diagonal gradient plus a seeded, blurred texture) so codecs have
  something realistic to compress;
* an index band across the top ``BAND_FRAC`` of the frame: ``INDEX_BITS`` black/white cells
  holding the frame index in binary (most significant bit left), robust to lossy codecs and
  to downscaling, read back with :func:`read_frame_index`;
* two static colour patches in the bottom corners — pure red (left) and pure blue (right) — for
  checking RGB channel order;
* a green square moving on a known trajectory; :meth:`SyntheticVideo.box_at` gives its
  normalised box in the DISPLAYED frame (rotation metadata applied), as ``types.py`` defines.

Writers: OpenCV (``mp4v`` in .mp4/.mov, ``mjpg`` in .avi, ``xvid`` in .avi/.mkv, ``vp90`` in
.webm) and PyAV (H.264 ``h264`` in .mp4/.mov/.mkv, VP9 ``vp9`` in .webm). Only the PyAV
writers can store rotation metadata (a display matrix, via
``VideoStream.set_display_rotation``) and variable frame rate (explicit presentation
timestamps), so ``rotation``/``vfr`` require one of them; :func:`has_pyav` says whether PyAV
is installed (the GPU hosts lack it).

Broken files for error tests: :func:`make_zero_byte`, :func:`make_text_as_mp4`,
:func:`make_truncated` and :func:`make_undecodable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

INDEX_BITS = 12
BAND_FRAC = 1 / 6
PATCH_FRAC = 1 / 6
RED = (255, 0, 0)
BLUE = (0, 0, 255)
GREEN = (0, 200, 0)

OPENCV_CODECS = {"mp4v": "mp4v", "mjpg": "MJPG", "xvid": "XVID", "vp90": "VP90"}
PYAV_CODECS = {"h264": ("libx264", "yuv420p"), "vp9": ("libvpx-vp9", "yuv420p")}
_AUTO_CODEC = {".mp4": "h264", ".mov": "h264", ".mkv": "h264", ".webm": "vp9", ".avi": "mjpg"}
# Without PyAV (e.g. the GPU hosts) "auto" falls back to OpenCV's own writers.
_AUTO_CODEC_OPENCV = {".mp4": "mp4v", ".mov": "mp4v", ".mkv": "xvid", ".webm": "vp90",
                      ".avi": "mjpg"}
# VFR clips ("cycle") cycle through these multiples of the nominal frame interval (mean 1);
# "ramp" clips run the first half at 1.5× the interval and the rest at 0.5× (a time-based
# seek lands far from the frame index there).
VFR_PATTERN = (0.5, 1.0, 1.5)
VFR_RAMP = (1.5, 0.5)
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class SyntheticVideo:
    """A generated clip and its ground truth. ``size_wh`` is the STORED (coded) size;
    ``display_wh`` applies ``rotation`` (clockwise degrees, as ``VideoInfo.rotation``)."""

    path: Path
    fps: float
    frame_count: int
    size_wh: tuple[int, int]
    codec: str
    rotation: int = 0
    vfr: bool | str = False
    timestamps_s: tuple[float, ...] = ()

    @property
    def display_wh(self) -> tuple[int, int]:
        w, h = self.size_wh
        return (h, w) if self.rotation in (90, 270) else (w, h)

    @property
    def duration_s(self) -> float:
        return self.frame_count / self.fps

    def box_at(self, index: int) -> Box:
        """Normalised [x1, y1, x2, y2] of the moving square at ``index``, displayed frame."""
        x1, y1, x2, y2 = _square_px(index, self.frame_count, self.size_wh)
        w, h = self.size_wh
        return rotate_box((x1 / w, y1 / h, x2 / w, y2 / h), self.rotation)

    def patch_boxes(self) -> dict[str, tuple[Box, tuple[int, int, int]]]:
        """Colour name → (normalised displayed box, RGB colour) of the static patches."""
        return {name: (rotate_box(box, self.rotation), rgb)
                for name, (box, rgb) in _patches_norm().items()}

    def index_of(self, rgb: np.ndarray) -> int:
        """Frame index encoded in an upright (displayed) RGB frame of this clip."""
        return read_frame_index(rgb, self.rotation)


def rotate_box(box: Box, rotation: int) -> Box:
    """Map a normalised box from the stored frame to the frame rotated ``rotation``° clockwise."""
    x1, y1, x2, y2 = box
    if rotation == 90:
        return (1 - y2, x1, 1 - y1, x2)
    if rotation == 180:
        return (1 - x2, 1 - y2, 1 - x1, 1 - y1)
    if rotation == 270:
        return (y1, 1 - x2, y2, 1 - x1)
    return (x1, y1, x2, y2)


def unrotate(rgb: np.ndarray, rotation: int) -> np.ndarray:
    """Undo a clockwise display rotation: displayed image → stored orientation."""
    turns = {0: 0, 90: 1, 180: 2, 270: 3}[rotation % 360]
    return np.ascontiguousarray(np.rot90(rgb, k=turns))  # rot90 is counter-clockwise


def read_frame_index(rgb: np.ndarray, rotation: int = 0) -> int:
    """Decode the binary index band of a frame (any size ≥ ~4 px per cell)."""
    img = unrotate(rgb, rotation)
    h, w = img.shape[:2]
    band_h = max(1, int(h * BAND_FRAC))
    gray = img[: band_h].astype(np.float32).mean(axis=2)
    value = 0
    for bit in range(INDEX_BITS):
        x0, x1 = bit * w / INDEX_BITS, (bit + 1) * w / INDEX_BITS
        cx0 = int(x0 + (x1 - x0) * 0.3)
        cx1 = max(int(x0 + (x1 - x0) * 0.7), cx0 + 1)
        cy0 = int(band_h * 0.25)
        cy1 = max(int(band_h * 0.75), cy0 + 1)
        value = (value << 1) | int(gray[cy0:cy1, cx0:cx1].mean() > 127)
    return value


def _patches_norm() -> dict[str, tuple[Box, tuple[int, int, int]]]:
    p = PATCH_FRAC
    return {"red": ((0.0, 1 - p, p, 1.0), RED), "blue": ((1 - p, 1 - p, 1.0, 1.0), BLUE)}


def _square_px(index: int, count: int, size_wh: tuple[int, int]) -> tuple[int, int, int, int]:
    """Pixel box of the moving square: left→right once over the clip, bobbing vertically,
    staying between the index band and the colour patches."""
    w, h = size_wh
    side = max(4, min(w, h) // 5)
    top, bottom = int(h * BAND_FRAC) + 2, int(h * (1 - PATCH_FRAC)) - 2
    t = index / max(1, count - 1)
    x1 = int(round((w - side) * t))
    span = max(0, bottom - top - side)
    y1 = top + int(round(span * (0.5 + 0.5 * np.sin(2 * np.pi * t))))
    return (x1, y1, x1 + side, y1 + side)


def _background(size_wh: tuple[int, int], seed: int) -> np.ndarray:
    import cv2

    w, h = size_wh
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 60 + 80 * (xx / max(1, w - 1) + yy / max(1, h - 1)) / 2
    noise = cv2.GaussianBlur(rng.normal(0, 25, (h, w, 3)).astype(np.float32), (0, 0), 2.0)
    img = base[..., None] + noise + np.array([10, 0, -10], np.float32)
    return np.clip(img, 30, 200).astype(np.uint8)


def render_frame(index: int, count: int, size_wh: tuple[int, int], background: np.ndarray
                 ) -> np.ndarray:
    """One stored-orientation RGB frame of a synthetic clip."""
    w, h = size_wh
    img = background.copy()
    band_h = max(1, int(h * BAND_FRAC))
    for bit in range(INDEX_BITS):
        on = (index >> (INDEX_BITS - 1 - bit)) & 1
        x0, x1 = int(bit * w / INDEX_BITS), int((bit + 1) * w / INDEX_BITS)
        img[:band_h, x0:x1] = 255 if on else 0
    for box, rgb in _patches_norm().values():
        bx1, by1, bx2, by2 = (int(round(v * s)) for v, s in zip(box, (w, h, w, h)))
        img[by1:by2, bx1:bx2] = rgb
    x1, y1, x2, y2 = _square_px(index, count, size_wh)
    img[y1:y2, x1:x2] = GREEN
    return img


@lru_cache(maxsize=1)
def has_pyav() -> bool:
    """Whether PyAV (package ``av``) can be imported; tests skip PyAV-only cases without it."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def _pick_codec(path: Path, codec: str) -> str:
    if codec == "auto":
        table = _AUTO_CODEC if has_pyav() else _AUTO_CODEC_OPENCV
        try:
            return table[path.suffix.lower()]
        except KeyError:
            raise ValueError(f"no default codec for {path.suffix!r}; pass codec=") from None
    if codec not in OPENCV_CODECS and codec not in PYAV_CODECS:
        raise ValueError(f"unknown codec {codec!r}; use one of "
                         f"{sorted(OPENCV_CODECS) + sorted(PYAV_CODECS)}")
    if codec in PYAV_CODECS and not has_pyav():
        raise RuntimeError(f"codec {codec!r} needs PyAV (package av), which is not installed; "
                           f"use an OpenCV codec: {', '.join(OPENCV_CODECS)}")
    return codec


def make_video(path: str | Path, *, duration_s: float = 2.0, fps: float = 10.0,
               size_wh: tuple[int, int] = (320, 240), codec: str = "auto", boxes: bool = True,
               rotation: int = 0, vfr: bool | str = False, seed: int = 0,
               faststart: bool = False) -> SyntheticVideo:
    """Write a synthetic clip of ``round(duration_s × fps)`` frames and return its truth.

    ``codec`` "auto" picks by suffix (.mp4/.mov/.mkv → h264, .webm → vp9, .avi → mjpg; without
    PyAV: .mp4/.mov → mp4v, .mkv → xvid, .webm → vp90, via OpenCV).
    ``rotation`` (0/90/180/270, clockwise) and ``vfr`` (True or "cycle": intervals cycle
    0.5/1/1.5× the nominal one; "ramp": 1.5× then 0.5×) need a PyAV codec. ``boxes=False`` leaves
    out the moving square. ``faststart`` puts the MP4 index first (PyAV .mp4/.mov only), which
    is what makes a truncated copy still open.
    """
    path = Path(path)
    codec = _pick_codec(path, codec)
    count = max(1, int(round(duration_s * fps)))
    if vfr not in (False, True, "cycle", "ramp"):
        raise ValueError(f"vfr must be False, True, 'cycle' or 'ramp', got {vfr!r}")
    if rotation % 360 not in (0, 90, 180, 270):
        raise ValueError(f"rotation must be a multiple of 90, got {rotation}")
    if codec in PYAV_CODECS and (size_wh[0] % 2 or size_wh[1] % 2):
        raise ValueError(f"{codec} (yuv420p) needs an even width and height, got {size_wh}")
    if (rotation % 360 or vfr or faststart) and codec not in PYAV_CODECS:
        raise ValueError("rotation, vfr and faststart need a PyAV codec (h264 or vp9)")
    background = _background(size_wh, seed)

    def frame(i: int) -> np.ndarray:
        img = render_frame(i, count, size_wh, background)
        if not boxes:
            x1, y1, x2, y2 = _square_px(i, count, size_wh)
            img[y1:y2, x1:x2] = background[y1:y2, x1:x2]
        return img

    if codec in OPENCV_CODECS:
        _write_opencv(path, OPENCV_CODECS[codec], fps, size_wh, count, frame)
        times = tuple(i / fps for i in range(count))
    else:
        times = _write_pyav(path, PYAV_CODECS[codec], fps, size_wh, count, frame,
                            rotation=rotation % 360, vfr=vfr, faststart=faststart)
    return SyntheticVideo(path=path, fps=fps, frame_count=count, size_wh=tuple(size_wh),
                          codec=codec, rotation=rotation % 360, vfr=vfr, timestamps_s=times)


def _write_opencv(path: Path, fourcc: str, fps: float, size_wh: tuple[int, int], count: int,
                  frame: Any) -> None:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, tuple(size_wh))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write {fourcc} into {path.name}")
    try:
        for i in range(count):
            writer.write(np.ascontiguousarray(frame(i)[:, :, ::-1]))
    finally:
        writer.release()


def _vfr_times(count: int, fps: float, kind: str) -> list[Fraction]:
    """Presentation times (s) for a VFR clip (see ``VFR_PATTERN`` / ``VFR_RAMP``)."""
    step = Fraction(1) / Fraction(fps).limit_denominator(1000)
    times, t = [], Fraction(0)
    for i in range(count):
        times.append(t)
        if kind == "ramp":
            factor = VFR_RAMP[0] if i < count // 2 else VFR_RAMP[1]
        else:
            factor = VFR_PATTERN[i % len(VFR_PATTERN)]
        t += step * Fraction(factor).limit_denominator(10)
    return times


def _write_pyav(path: Path, codec: tuple[str, str], fps: float, size_wh: tuple[int, int],
                count: int, frame: Any, *, rotation: int, vfr: bool | str, faststart: bool
                ) -> tuple[float, ...]:
    import av

    name, pix_fmt = codec
    rate = Fraction(fps).limit_denominator(1001)
    options = {"movflags": "faststart"} if faststart else {}
    tb = Fraction(1, 90000)
    stamps: list[float] = []
    with av.open(str(path), "w", options=options) as container:
        stream = container.add_stream(name, rate=rate)
        stream.width, stream.height = size_wh
        stream.pix_fmt = pix_fmt
        stream.options = {"crf": "18", "preset": "veryfast"} if name == "libx264" else {}
        if rotation:
            stream.set_display_rotation(-rotation)  # PyAV takes counter-clockwise degrees
        if vfr:
            stream.codec_context.time_base = tb
        times = _vfr_times(count, fps, "ramp" if vfr == "ramp" else "cycle") if vfr else None
        for i in range(count):
            vf = av.VideoFrame.from_ndarray(frame(i), format="rgb24")
            if times is not None:
                vf.pts, vf.time_base = int(round(times[i] / tb)), tb
                stamps.append(vf.pts * float(tb))
            else:
                stamps.append(i / fps)
            for packet in stream.encode(vf):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return tuple(stamps)


# -- broken files -------------------------------------------------------------------------

def make_zero_byte(path: str | Path) -> Path:
    """An empty file (e.g. an upload that failed)."""
    path = Path(path)
    path.write_bytes(b"")
    return path


def make_text_as_mp4(path: str | Path) -> Path:
    """A text file with a video suffix."""
    path = Path(path)
    path.write_text("this is not a video, just text renamed to .mp4\n" * 20)
    return path


def make_truncated(src: str | Path, dst: str | Path, fraction: float) -> Path:
    """The first ``fraction`` of ``src``'s bytes (an interrupted download or copy)."""
    data = Path(src).read_bytes()
    dst = Path(dst)
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


def make_undecodable(path: str | Path) -> Path:
    """A well-formed MJPEG AVI (use a .avi name) whose index promises 10 frames but whose
    frame data is all zeros: it opens, reports a frame count and size, and decodes nothing."""
    path = Path(path)
    make_video(path, duration_s=1.0, fps=10, size_wh=(64, 64), codec="mjpg")
    data = bytearray(path.read_bytes())
    pos, end = data.find(b"movi") + 4, data.find(b"idx1")
    if pos < 4 or end < pos:
        raise RuntimeError("unexpected AVI layout from OpenCV's MJPG writer")
    while pos + 8 <= end:  # RIFF chunks: 4-byte tag, 4-byte little-endian size, payload
        size = int.from_bytes(data[pos + 4:pos + 8], "little")
        data[pos + 8:pos + 8 + size] = bytes(size)
        pos += 8 + size + (size & 1)
    path.write_bytes(bytes(data))
    return path
