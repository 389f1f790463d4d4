"""Odd and hostile files for the reliability corpus, made at test time with PyAV / OpenCV.

* :func:`make_timed_video` — a synthetic clip (index band, see :mod:`chord_core.testing.videos`)
  whose frame ``k`` is presented at ``times_s[k]`` exactly: timestamp jumps, irregular rates,
  a lying header rate (``header_fps``). :func:`make_restarting_ts` concatenates two MPEG-TS
  recordings whose clock restarts (a backward jump, as after joining camera files).
* :func:`make_audio_only`, :func:`make_png`, :func:`make_jpeg`, :func:`make_ansi_art`,
  :func:`make_armored_text` — files FFmpeg opens although they are no video.
* :func:`container_times` — every decoded frame's presentation time, read independently of
  Chord (PyAV decode), relative to the first frame: the truth a probe is checked against.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from chord_core.testing.videos import SyntheticVideo, _background, render_frame

TIME_BASE = Fraction(1, 90000)


def make_timed_video(path: str | Path, times_s: list[float], *, size_wh: tuple[int, int] = (96, 64),
                     codec: str = "libx264", header_fps: float = 25.0, fmt: str | None = None,
                     first_index: int = 0, total: int | None = None) -> SyntheticVideo:
    """Frames ``first_index …`` shown at ``times_s`` (seconds; the stream's time base is
    1/90000). ``header_fps`` is the rate the stream claims; ``total`` the frame count the
    moving square's path is spread over (default: this file's frames)."""
    import av

    path = Path(path)
    count = total or len(times_s)
    background = _background(size_wh, 0)
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=Fraction(header_fps).limit_denominator(1001))
        stream.width, stream.height = size_wh
        stream.pix_fmt = "yuvj420p" if codec == "mjpeg" else "yuv420p"
        stream.codec_context.time_base = TIME_BASE
        if codec in ("libx264", "libx265"):
            stream.options = {"preset": "veryfast", "crf": "20"}
            if codec == "libx265":
                stream.options["x265-params"] = "log-level=none"
        for k, t in enumerate(times_s):
            img = render_frame(first_index + k, count, size_wh, background)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts, frame.time_base = int(round(t / TIME_BASE)), TIME_BASE
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return SyntheticVideo(path=path, fps=header_fps, frame_count=len(times_s),
                          size_wh=tuple(size_wh), codec=codec, vfr=True,
                          timestamps_s=tuple(times_s))


def make_restarting_ts(path: str | Path, first: list[float], second: list[float]) -> Path:
    """Two MPEG-TS recordings byte-joined: the second's clock restarts at ``second[0]``."""
    path = Path(path)
    a, b = path.with_suffix(".a.ts"), path.with_suffix(".b.ts")
    n = len(first) + len(second)
    make_timed_video(a, first, fmt="mpegts", total=n)
    make_timed_video(b, second, fmt="mpegts", first_index=len(first), total=n)
    path.write_bytes(a.read_bytes() + b.read_bytes())
    a.unlink(), b.unlink()
    return path


def make_audio_only(path: str | Path, seconds: float = 1.0) -> Path:
    """An AAC track and nothing else (e.g. ``voice.mp4`` or ``.m4a``)."""
    import av

    path = Path(path)
    rate = 44100
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=rate)
        samples = np.zeros((1, 1024), np.float32)
        for i in range(int(seconds * rate / 1024)):
            frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
            frame.sample_rate, frame.pts = rate, i * 1024
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _image_bytes(ext: str) -> bytes:
    import cv2

    img = render_frame(0, 1, (64, 48), _background((64, 48), 0))
    ok, data = cv2.imencode(ext, img[:, :, ::-1])
    assert ok, ext
    return data.tobytes()


def make_png(path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(_image_bytes(".png"))
    return path


def make_jpeg(path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(_image_bytes(".jpg"))
    return path


def make_ansi_art(path: str | Path) -> Path:
    """ANSI art: escape codes and CP437 block characters (what ``.ans``/``.nfo`` files hold);
    FFmpeg's tty demuxer renders such files as video."""
    path = Path(path)
    line = b"\x1b[1;31m" + bytes([0xDB, 0xB2, 0xB1, 0xB0]) * 10 + b"\x1b[0m secret\r\n"
    path.write_bytes(line * 40)
    return path


def make_armored_text(path: str | Path) -> Path:
    """An ASCII-armoured private key look-alike (plain text in an ``.asc`` file)."""
    path = Path(path)
    body = "\n".join("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3ODkwYWJjZGVmZ2hpamts"
                     for _ in range(20))
    path.write_text(f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{body}\n"
                    "-----END PGP PRIVATE KEY BLOCK-----\n")
    return path


def container_times(path: str | Path) -> list[float]:
    """Presentation time of every decoded frame, seconds from the first (PyAV decode)."""
    import av

    times: list[float] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for packet in container.demux(stream):
            try:
                frames = packet.decode()
            except av.error.InvalidDataError:  # a truncated file's cut packet
                continue
            times.extend(float(frame.pts * frame.time_base) for frame in frames)
    return [t - times[0] for t in times]
