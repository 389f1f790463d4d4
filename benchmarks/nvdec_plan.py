"""How busy the NVDEC sessions are kept by the GOP plan alone (issue 34), on CPU: the share
of ``--sessions`` decoders a read of ``--slice`` dense frames keeps busy, by decoded-frame
cost, for the old split (consecutive runs, each read waiting for its largest) and the
current placement (``chord_core.media.nvdec_plan``: one read alone, and ``--frames`` frames
of reads queued behind each other). A plan's figure, not a GPU's: the decoder's own share
comes from ``decode_readers.py``'s ``decoder_busy_share`` on the device.

``--simulate MS``: the real ``NvdecReader`` (its session threads, queues and checks) over
simulated sessions whose calls sleep ``MS`` milliseconds per frame they decode (GOP heads
and a seek's restart included; 8×8 frames, resized on the CPU), reads of ``--slice`` frames
with ``--in-flight`` 1 and 3 submitted ahead: the sessions' share of time inside their
calls over the run's wall. A simulation of the scheduling on this machine's CPU (the
Python per frame included), not of NVDEC.

    .venv/bin/python benchmarks/nvdec_plan.py --gop 60 --slice 512 --sessions 4,8
    .venv/bin/python benchmarks/nvdec_plan.py --sessions 8 --simulate 1.0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chord_core.media.gop import plan_gops, split_reads  # noqa: E402
from chord_core.media.nvdec_plan import Lane, assign, busy_share  # noqa: E402


class SimSession:
    """A simulated decoder session: sleeps ``ms`` a decoded frame (see module docstring)."""

    def __init__(self, gop: int, ms: float, pts: Any) -> None:
        self.gop, self.ms, self.pts, self.pos = gop, ms, pts, -1

    def get_batch_frames_by_index(self, indices: list[int]) -> list[Any]:
        import numpy as np

        cost = 0
        for k in indices:
            if k <= self.pos:
                self.pos = -1  # a backward call reopens the file
            key = k - k % self.gop
            start = key if key > self.pos + 1 else self.pos + 1
            cost += k - start + 1
            self.pos = k
        time.sleep(cost * self.ms / 1000)
        return [SimFrame(np.full((8, 8, 3), k % 256, np.uint8), self.pts[k]) for k in indices]


class SimFrame:
    def __init__(self, pixels: Any, pts: int) -> None:
        self.pixels, self.pts = pixels, pts

    def __dlpack__(self, **kw: Any) -> Any:
        return self.pixels.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.pixels.__dlpack_device__()

    def getPTS(self) -> int:  # noqa: N802 — PyNvVideoCodec's name
        return self.pts


def simulate(gop: int, frames: int, size: int, sessions: int, ms: float) -> None:
    import tempfile
    from collections import deque
    from fractions import Fraction

    from chord_core.media import packet_index as pi
    from chord_core.media.nvdec import NvdecReader
    from chord_core.media.reader_types import ReadRequest
    from chord_core.types import VideoInfo

    packets = []
    for g in range(0, frames, gop):  # decode order: key, then its B-frame after the P
        ks = list(range(g, min(g + gop, frames)))
        packets += [(k * 512, k == g) for k in ks[:1] + ks[2:3] + ks[1:2] + ks[3:]]
    index = pi.index_from_packets(packets, Fraction(1, 15360), codec="h264",
                                  pix_fmt="yuv420p", size_wh=(64, 48))
    pi.packet_index = lambda p: index  # type: ignore[assignment]  # the simulated file's
    with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
        info = VideoInfo(path=f.name, duration_s=frames / 30, fps=30.0, frame_count=frames,
                         width=64, height=48, codec="h264", container="mp4",
                         timeline=((0, 0.0, 1 / 30),))
        for q in (1, 3):
            r = NvdecReader(sessions, device="cpu",
                            factory=lambda name, gpu: SimSession(gop, ms, index.pts))
            slices = [tuple(range(s, min(s + size, frames))) for s in range(0, frames, size)]
            r.read(ReadRequest(info, slices[0], (8, 8)))  # sessions open, the pts shift
            t0, calls, pending = time.perf_counter(), 0.0, deque()
            if q > 1 and not hasattr(r, "submit"):  # a reader from before submit()
                continue
            for part in slices[1:]:
                req = ReadRequest(info, part, (8, 8))
                if q == 1:
                    calls += r.read(req).stats.get("nvdec_calls_s", 0.0)
                    continue
                pending.append(r.submit(req))
                if len(pending) >= q:
                    calls += pending.popleft().result().stats.get("nvdec_calls_s", 0.0)
            while pending:
                calls += pending.popleft().result().stats.get("nvdec_calls_s", 0.0)
            wall = time.perf_counter() - t0
            n = sum(len(p) for p in slices[1:])
            print(f"simulated x{sessions}, {ms} ms a decoded frame, {size}-frame reads, "
                  f"{q} in flight: {n / wall:,.0f} frames/s, sessions busy "
                  f"{calls / (sessions * wall):.2f} (all busy: "
                  f"{sessions * 1000 / ms:,.0f} frames/s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gop", type=int, default=60, help="frames from keyframe to keyframe")
    ap.add_argument("--slice", type=int, default=512, help="frames a read")
    ap.add_argument("--frames", type=int, default=9000, help="frames of the queued reads")
    ap.add_argument("--sessions", default="4,8")
    ap.add_argument("--simulate", type=float, default=0.0,
                    help="ms a decoded frame: run the reader over simulated sessions")
    args = ap.parse_args()
    if args.simulate:
        for n in (int(v) for v in args.sessions.split(",")):
            simulate(args.gop, args.frames, args.slice, n, args.simulate)
        return 0
    keys = list(range(0, args.frames + 10 * args.gop, args.gop))
    starts = list(range(0, args.frames - args.slice + 1, args.slice))
    reads = [plan_gops(range(s, s + args.slice), keys) for s in starts]
    for n in (int(v) for v in args.sessions.split(",")):
        old = []
        for r in reads[:3]:
            c = [sum(g.cost for g in p) for p in split_reads(r, n)]
            old.append(round(sum(c) / (n * max(c)), 2))
        one = [round(busy_share(r, n), 2) for r in reads[:3]]
        lanes = [Lane(opened=True) for _ in range(n)]
        for r in reads:
            assign(r, lanes, n)
        q = [lane.queued for lane in lanes]
        joined = sum(max(sum(g.cost for g in p) for p in split_reads(r, n)) for r in reads)
        total = sum(g.cost for r in reads for g in r)
        print(f"x{n}: one {args.slice}-frame read at {starts[:3]}: consecutive runs {old}, "
              f"by cost {one}; {len(reads)} reads queued: by cost "
              f"{sum(q) / (n * max(q)):.2f} (seeks counted as work), consecutive runs "
              f"joined per read {total / (n * joined):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
