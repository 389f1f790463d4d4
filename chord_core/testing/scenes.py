"""Synthetic clips with known scene cuts (long-video tests and benchmarks).

:func:`make_scene_clip` writes an H.264 clip (PyAV) whose scenes differ in colour and layout,
each with a slowly moving square, cut hard at known frames, with explicit presentation times
(optionally uneven, so a time computed from the average rate would be wrong).
:func:`make_looped_clip` makes hours of video cheaply: one segment is encoded once, then its
packets are written again and again with shifted timestamps (no re-encoding).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np

TIME_BASE = Fraction(1, 90_000)
PALETTE = ((200, 60, 40), (40, 170, 70), (50, 80, 200), (220, 200, 60), (150, 60, 170),
           (60, 190, 200), (240, 240, 240), (30, 30, 30))


@dataclass(frozen=True)
class SceneClip:
    """A written clip and its truth: cut frames, every frame's time, the square's box."""

    path: Path
    size_wh: tuple[int, int]
    times_s: tuple[float, ...]
    cuts: tuple[int, ...]

    @property
    def frame_count(self) -> int:
        return len(self.times_s)

    def box_at(self, index: int) -> tuple[float, float, float, float]:
        return square_box(index, self.frame_count)


def square_box(index: int, count: int) -> tuple[float, float, float, float]:
    """Normalised box of the moving square: left to right once over the whole clip."""
    side = 0.2
    x = 0.05 + 0.7 * index / max(1, count - 1)
    return (x, 0.4, x + side, 0.4 + side)


def scene_frame(index: int, count: int, scene: int, size_wh: tuple[int, int]) -> np.ndarray:
    """Scene ``scene``'s look (a palette colour, stripes whose direction and pitch change
    with the scene) plus the moving square."""
    w, h = size_wh
    rng = np.random.default_rng(scene)
    base = np.array(PALETTE[scene % len(PALETTE)], np.int16)
    yy, xx = np.mgrid[0:h, 0:w]
    pitch = 8 + 6 * (scene % 4)
    stripes = ((xx if scene % 2 else yy) // pitch) % 2
    img = base + (stripes[..., None] * rng.integers(-50, 50, 3)).astype(np.int16)
    x1, y1, x2, y2 = square_box(index, count)
    img[int(y1 * h): int(y2 * h), int(x1 * w): int(x2 * w)] = (250, 250, 20)
    return np.clip(img, 0, 255).astype(np.uint8)


def even_times(count: int, fps: float) -> tuple[float, ...]:
    return tuple(round(i / fps, 6) for i in range(count))


def uneven_times(count: int, fps: float, pattern: Sequence[float] = (0.6, 1.0, 1.4)
                 ) -> tuple[float, ...]:
    """Frame k lasts pattern[k % len] frame intervals: the mean rate is ``fps``, no frame
    time is k / fps."""
    t, out = 0.0, []
    for k in range(count):
        out.append(round(t, 6))
        t += pattern[k % len(pattern)] / fps
    return tuple(out)


def make_scene_clip(path: str | Path, cuts: Sequence[int], times_s: Sequence[float], *,
                    size_wh: tuple[int, int] = (160, 96), gop: int = 12) -> SceneClip:
    """Write the clip: scene k runs from cut k-1 (or frame 0) to cut k; ``times_s`` are the
    frames' presentation times (90 kHz clock, so exact to 11 µs)."""
    import av

    path = Path(path)
    count = len(times_s)
    bounds = sorted(cuts)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width, stream.height = size_wh
        stream.pix_fmt = "yuv420p"
        stream.time_base = TIME_BASE
        stream.codec_context.time_base = TIME_BASE
        stream.options = {"g": str(gop), "preset": "ultrafast", "bf": "0"}
        for k, t in enumerate(times_s):
            scene = sum(1 for c in bounds if c <= k)
            frame = av.VideoFrame.from_ndarray(scene_frame(k, count, scene, size_wh),
                                               format="rgb24")
            frame.pts = int(round(t / TIME_BASE))
            frame.time_base = TIME_BASE
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return SceneClip(path, size_wh, tuple(times_s), tuple(bounds))


def make_looped_clip(path: str | Path, *, total_s: float, segment_s: float = 60.0,
                     fps: float = 10.0, size_wh: tuple[int, int] = (1920, 1080),
                     gop_s: float = 5.0, cut: bool = False) -> tuple[Path, int]:
    """A long low-motion H.264 clip: a ``segment_s`` segment (one scene with a moving square,
    or two with ``cut``) encoded once, its packets repeated with shifted timestamps up to
    ``total_s``. Returns (path, frame count)."""
    import av

    path = Path(path)
    seg = path.with_suffix(".segment.mp4")
    n = int(round(segment_s * fps))
    make_scene_clip(seg, [n // 2] if cut else [], even_times(n, fps), size_wh=size_wh,
                    gop=max(1, int(round(gop_s * fps))))
    loops = max(1, int(np.ceil(total_s / segment_s)))
    written = 0
    with av.open(str(seg)) as src, av.open(str(path), "w") as dst:
        ins = src.streams.video[0]
        outs = dst.add_stream_from_template(ins)
        packets = [p for p in src.demux(ins) if p.size]
        span = int(round(segment_s / ins.time_base))
        for loop in range(loops):
            for p in packets:
                p.stream = outs
                shift = loop * span
                p.pts, p.dts = p.pts + (shift if loop else 0), p.dts + (shift if loop else 0)
                dst.mux(p)
                p.pts, p.dts = p.pts - (shift if loop else 0), p.dts - (shift if loop else 0)
                written += 1
    seg.unlink()
    return path, written
