"""Real camera footage for the long-video and sampling benchmarks, from a Debian package.

The synthetic hour (one low-motion scene, its packets repeated) is 25.8 MB; real footage is
5–10× the bits and decodes far slower, so speed figures for long video come from this clip
instead. The source is OpenCV's ``vtest.avi`` — a fixed surveillance camera over a street
with pedestrians, 768×576 at 10 fps, 79.5 s, MS-MPEG4 — shipped in Debian's ``opencv-doc``
package (``/usr/share/doc/opencv-doc/examples/data/vtest.avi``; or ``apt-get download
opencv-doc && dpkg -x opencv-doc_*.deb DIR`` without installing it). It is re-encoded once
to H.264 at the size and rate asked (default 1280×720 at 30 fps, a keyframe every 2 s, as
camera exports are), each in-between frame blended from its two neighbours so the encoder
sees motion at every frame, and that encoded segment's packets are repeated, with their
times shifted, up to the length asked. A loop of 79.5 s is longer than a 60 s chunk, so no
two chunk jobs read the same pictures.

    python3 benchmarks/footage.py --minutes 60 --out /tmp/real_hour.mp4
    python3 benchmarks/footage.py --minutes 10 --out /tmp/real_10min.mp4 --source vtest.avi
    python3 benchmarks/footage.py --segment seg.mp4 --minutes 60 --out /tmp/real_hour.mp4

``--segment`` repeats a segment encoded earlier (the ``*.segment.mp4`` a run leaves beside its
output) without encoding again: a GPU host gets the 7.8 MB segment and builds its own hour
(355 MB) in under a second, where carrying the hour would not fit a call.

Prints the file's size, bit rate and MB per hour (the issue's reference real hour: 225 MB).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from fractions import Fraction
from pathlib import Path

DEBIAN_SOURCE = Path("/usr/share/doc/opencv-doc/examples/data/vtest.avi")


def _frames(source: Path, size_wh: tuple[int, int]):
    """The source's frames, RGB at ``size_wh``."""
    import av

    with av.open(str(source)) as box:
        stream = box.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in box.decode(stream):
            yield frame.reformat(width=size_wh[0], height=size_wh[1], format="rgb24",
                                 interpolation="AREA").to_ndarray()


def encode_segment(source: Path, out: Path, size_wh: tuple[int, int], fps: int,
                   keyframe_s: float, crf: int) -> dict:
    """Re-encode the source once as H.264 at ``fps``, blending in-between frames."""
    import av
    import numpy as np

    src_fps = _source_fps(source)
    ratio = fps / src_fps
    with av.open(str(out), "w") as box:
        stream = box.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size_wh[0], size_wh[1], "yuv420p"
        stream.options = {"crf": str(crf), "preset": "veryfast",
                          "g": str(round(fps * keyframe_s)), "keyint_min": str(round(fps *
                                                                              keyframe_s)),
                          "sc_threshold": "0", "bf": "2"}
        prev, n = None, 0
        for cur in _frames(source, size_wh):
            if prev is not None:
                steps = max(1, round(ratio))
                for k in range(steps):
                    t = k / steps
                    pic = (prev * (1 - t) + cur * t).astype(np.uint8)
                    for packet in stream.encode(av.VideoFrame.from_ndarray(pic, format="rgb24")):
                        box.mux(packet)
                    n += 1
            prev = cur.astype(np.float32)
        for packet in stream.encode(av.VideoFrame.from_ndarray(prev.astype(np.uint8),
                                                               format="rgb24")):
            box.mux(packet)
        for packet in stream.encode(None):
            box.mux(packet)
        n += 1
    return {"segment_frames": n, "segment_s": n / fps, "source_fps": src_fps}


def _source_fps(source: Path) -> float:
    import av

    with av.open(str(source)) as box:
        rate = box.streams.video[0].average_rate
    return float(rate) if rate else 10.0


def repeat_packets(segment: Path, out: Path, minutes: float) -> tuple[int, float]:
    """Write the segment's packets again and again, times shifted, to at least ``minutes``;
    (packets written, seconds of video)."""
    import av

    with av.open(str(segment)) as src:
        s_in = src.streams.video[0]
        packets = [p for p in src.demux(s_in) if p.size]
        tb: Fraction = s_in.time_base
        length = max(p.pts + p.duration for p in packets) - min(p.pts for p in packets)
        with av.open(str(out), "w") as dst:
            s_out = dst.add_stream_from_template(s_in)
            loops = max(1, math.ceil(minutes * 60 / float(length * tb) - 1e-9))
            written = 0
            for i in range(loops):
                shift = i * length
                for p in packets:
                    pts, dts = p.pts, p.dts
                    p.pts, p.dts, p.stream = pts + shift, dts + shift, s_out
                    dst.mux(p)
                    p.pts, p.dts = pts, dts  # the next loop shifts from the original times
                    written += 1
    return written, float(loops * length * tb)


def _repeat_only(segment: Path, out: Path, minutes: float) -> int:
    """Build the long clip from a segment encoded earlier; print what ``main`` prints."""
    if not segment.is_file():
        print(f"error: no segment at {segment}\nhint: run this script once without --segment; "
              "it leaves OUT.segment.mp4 beside its output", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    packets, seconds = repeat_packets(segment, out, minutes)
    size = out.stat().st_size
    print(json.dumps({"segment": str(segment), "out": str(out), "duration_s": round(seconds, 3),
                      "packets": packets, "bytes": size,
                      "mb_per_hour": round(size / 1e6 * 3600 / seconds, 1),
                      "build_s": round(time.perf_counter() - t0, 1)}, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", default=str(DEBIAN_SOURCE),
                    help="real footage to start from (default: opencv-doc's vtest.avi)")
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--keyframe-s", type=float, default=2.0)
    ap.add_argument("--crf", type=int, default=23)
    ap.add_argument("--segment", default=None, help="repeat this encoded segment, no encode")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.segment:
        return _repeat_only(Path(args.segment), Path(args.out), args.minutes)
    source = Path(args.source)
    if not source.is_file():
        print(f"error: no footage at {source}\nhint: apt-get install opencv-doc, or "
              "`apt-get download opencv-doc && dpkg -x opencv-doc_*.deb DIR` and pass "
              "--source DIR/usr/share/doc/opencv-doc/examples/data/vtest.avi", file=sys.stderr)
        return 2
    w, h = (int(v) for v in args.size.lower().split("x"))
    out = Path(args.out)
    segment = out.with_name(out.stem + ".segment.mp4")
    t0 = time.perf_counter()
    info = encode_segment(source, segment, (w, h), args.fps, args.keyframe_s, args.crf)
    packets, seconds = repeat_packets(segment, out, args.minutes)
    size = out.stat().st_size
    res = {"source": str(source), "out": str(out), "size_wh": [w, h], "fps": args.fps,
           "duration_s": round(seconds, 3), "packets": packets, "bytes": size,
           "mb_per_hour": round(size / 1e6 * 3600 / seconds, 1),
           "kbit_per_s": round(size * 8 / 1e3 / seconds, 1),
           "build_s": round(time.perf_counter() - t0, 1), **info}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
