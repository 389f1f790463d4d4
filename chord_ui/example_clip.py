"""A first clip to try, made on this machine (nothing is downloaded): 6 s, 640×360, 25 fps,
H.264 — a red ball crossing the frame and a blue square bouncing, over a soft gradient.
Saved like an upload (content-hashed, private), so it behaves as any uploaded clip.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from chord_ui.uploads import ClipSource, save_upload

NAME = "chord-example.mp4"
TARGET = "the red ball"
SIZE_WH = (640, 360)
FPS = 25
SECONDS = 6.0


def _frames():  # noqa: ANN202 — yields H×W×3 uint8 RGB frames
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


def example_bytes() -> bytes:
    """The example clip as MP4 bytes (deterministic: the same clip every time)."""
    import av

    from chord_core.analysis.render import h264_encoder

    codec = h264_encoder() or "mpeg4"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / NAME
        with av.open(str(path), "w") as out:
            stream = out.add_stream(codec, rate=FPS)
            stream.width, stream.height, stream.pix_fmt = *SIZE_WH, "yuv420p"
            for img in _frames():
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        return path.read_bytes()


def example_clip(data_dir: Path | None = None) -> tuple[ClipSource, str]:
    """Make (once) and return the example clip, with a target to look for in it."""
    return save_upload(NAME, io.BytesIO(example_bytes()), data_dir), TARGET
