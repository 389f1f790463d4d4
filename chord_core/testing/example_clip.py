"""The example clip, made on this machine (nothing is downloaded): 6 s, 640×360, 25 fps,
H.264 — a red ball crossing the frame and a blue square bouncing, over a soft gradient.

The app's *Try an example clip* button and ``python -m chord_core example-clip PATH`` (the
input the README's examples run on) both make it here; a ``.jpg``/``.png`` path gets one frame
of it as a still image (for ``entail`` and the service's image endpoints).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from chord_core.errors import InputError

log = logging.getLogger(__name__)

NAME = "chord-example.mp4"
TARGET = "the red ball"
SIZE_WH = (640, 360)
FPS = 25
SECONDS = 6.0
VIDEO_SUFFIXES = (".mp4", ".mkv", ".mov", ".avi")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def frames() -> Iterator[Any]:
    """The clip's frames, H×W×3 uint8 RGB (numpy arrays), deterministic."""
    import numpy as np

    w, h = SIZE_WH
    ys, xs = np.mgrid[0:h, 0:w]
    base = np.stack([40 + 60 * xs / w, 70 + 50 * ys / h, 110 + 0 * xs], axis=-1)
    base = base.astype(np.uint8)
    n = int(SECONDS * FPS)
    for k in range(n):
        img = base.copy()
        f = k / (n - 1)
        cx, cy, r = 60 + f * (w - 120), h * 0.35 + 40 * np.sin(6.3 * f), 34
        ball = (xs - cx) ** 2 + (ys - cy) ** 2 <= r * r
        img[ball] = (220, 40, 40)
        sx = int(w * 0.75 - 120 * abs(((2 * f) % 2) - 1))
        sy = int(h * 0.62)
        img[sy:sy + 70, sx:sx + 70] = (40, 90, 230)
        yield img


def _encoder() -> str:
    """PyAV's H.264 encoder where the build has one (browsers play the clip as is), else
    MPEG-4 part 2 (then the app makes a preview, as for any such file)."""
    import av

    for name in ("libx264", "libopenh264"):
        try:
            av.codec.Codec(name, "w")
        except (ValueError, av.FFmpegError):
            continue
        return name
    return "mpeg4"


def _encode(path: Path) -> None:
    import av

    codec = _encoder()
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = *SIZE_WH, "yuv420p"
        for img in frames():
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)


def example_bytes() -> bytes:
    """The example clip as MP4 bytes (the same clip every time)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / NAME
        _encode(path)
        return path.read_bytes()


def write_example(path: str | Path) -> Path:
    """Write the example clip (a video suffix) or its middle frame (an image suffix) to
    ``path``, creating missing folders; whole or not at all (temporary file + rename)."""
    from PIL import Image

    dest = Path(path).expanduser()
    suffix = dest.suffix.lower()
    if suffix not in VIDEO_SUFFIXES + IMAGE_SUFFIXES:
        raise InputError(f"{dest.name}: cannot tell what to write from the name",
                         hint="end the path in " + ", ".join(VIDEO_SUFFIXES + IMAGE_SUFFIXES))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part{suffix}")
    try:
        if suffix in VIDEO_SUFFIXES:
            _encode(tmp)
        else:
            middle = int(SECONDS * FPS) // 2
            img = next(f for k, f in enumerate(frames()) if k == middle)
            fmt = "PNG" if suffix == ".png" else "JPEG"
            Image.fromarray(img).save(tmp, format=fmt)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    log.info("wrote the example %s to %s", "clip" if suffix in VIDEO_SUFFIXES else "image", dest)
    return dest
