"""Odd and hostile files for the reliability corpus, made at test time with PyAV / OpenCV.

* :func:`make_timed_video` — a synthetic clip (index band, see :mod:`chord_core.testing.videos`)
  whose frame ``k`` is presented at ``times_s[k]`` exactly: timestamp jumps, irregular rates,
  a lying header rate (``header_fps``). :func:`make_restarting_ts` concatenates two MPEG-TS
  recordings whose clock restarts (a backward jump, as after joining camera files).
* :func:`make_audio_only`, :func:`make_png`, :func:`make_jpeg`, :func:`make_ansi_art`,
  :func:`make_armored_text` — files FFmpeg opens although they are no video.
* :func:`make_packed_bframes_avi` — MPEG-4 part 2 in AVI with DivX-style *packed* B-frames
  (OpenCV's ``Megamind.avi`` kind): PyAV decodes its frames in display order but reports
  their pts out of order (1, 3, 2, 5, 4 …).
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


_VOP = b"\x00\x00\x01\xb6"  # MPEG-4 part 2 VOP start code; 2 bits after it: I P B S
_DIVX_PACKED = b"\x00\x00\x01\xb2DivX503b1393p"  # user data: 'p' = packed bitstream


def _vop_type(data: bytes) -> str:
    at = data.find(_VOP)
    return "IPBS"[data[at + 4] >> 6] if at >= 0 else "?"


def _n_vop(p_vop: bytes, time_bits: int) -> bytes:
    """A not-coded VOP (the placeholder a packed stream puts where the P-frame was): the
    P-VOP's header bits up to its time stamp, then ``vop_coded = 0`` and stuffing."""
    at = p_vop.find(_VOP) + 4
    bits = [(p_vop[at + k // 8] >> (7 - k % 8)) & 1 for k in range(8 * 8)]
    end = 2
    while bits[end]:  # modulo_time_base: ones, then a zero
        end += 1
    head = bits[: end + 1 + 1 + time_bits + 1] + [0, 0]  # marker, increment, marker; coded=0
    head += [1] * (-len(head) % 8)
    return _VOP + bytes(int("".join(map(str, head[k:k + 8])), 2)
                        for k in range(0, len(head), 8))


def _mpeg4_packets(count: int, fps: int, size_wh: tuple[int, int]) -> list[bytes]:
    """An I P B P B … MPEG-4 part 2 stream of synthetic frames, packets in decode order."""
    import io

    import av

    buf, background = io.BytesIO(), _background(size_wh, 0)
    with av.open(buf, "w", format="avi") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = size_wh
        stream.pix_fmt, stream.bit_rate = "yuv420p", 4_000_000
        stream.codec_context.max_b_frames, stream.codec_context.gop_size = 1, 10 * fps
        for k in range(count):
            frame = av.VideoFrame.from_ndarray(render_frame(k, count, size_wh, background),
                                               format="rgb24")
            frame.pts = k
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    buf.seek(0)
    with av.open(buf) as container:
        return [bytes(p) for p in container.demux(container.streams.video[0]) if p.size]


def make_packed_bframes_avi(path: str | Path, count: int = 96, fps: int = 24,
                            size_wh: tuple[int, int] = (112, 84)) -> SyntheticVideo:
    """Frame ``k`` shown at ``k / fps``, stored as a packed bitstream: each P-frame shares an
    AVI chunk with the B-frame after it, and a not-coded VOP holds the next chunk's place
    (what DivX and XviD wrote). AVI stores no pts, so the decoder's pts come out of order."""
    import av

    path, packets, packed = Path(path), _mpeg4_packets(count, fps, size_wh), []
    time_bits = max(1, (fps - 1).bit_length())  # vop_time_increment: resolution = fps
    k = 0
    while k < len(packets):
        if _vop_type(packets[k]) == "P" and k + 1 < len(packets) \
                and _vop_type(packets[k + 1]) == "B":
            packed += [packets[k] + packets[k + 1], _n_vop(packets[k], time_bits)]
            k += 2
        else:
            packed.append(packets[k])
            k += 1
    vop = packed[0].find(_VOP)
    packed[0] = packed[0][:vop] + _DIVX_PACKED + packed[0][vop:]
    with av.open(str(path), "w", format="avi") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = size_wh
        stream.pix_fmt = "yuv420p"
        stream.codec_context.codec_tag = "XVID"
        for n, data in enumerate(packed):
            packet = av.Packet(data)
            packet.stream, packet.time_base = stream, Fraction(1, fps)
            packet.pts = packet.dts = n
            packet.is_keyframe = n == 0
            container.mux(packet)
    return SyntheticVideo(path=path, fps=float(fps), frame_count=count, size_wh=tuple(size_wh),
                          codec="mpeg4", timestamps_s=tuple(k / fps for k in range(count)))


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
