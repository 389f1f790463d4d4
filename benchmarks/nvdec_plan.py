"""How busy the NVDEC sessions are kept by the GOP plan alone (issue 34), on CPU: the share
of ``--sessions`` decoders a read of ``--slice`` dense frames keeps busy, by decoded-frame
cost, for the old split (consecutive runs, each read waiting for its largest) and the
current placement (``chord_core.media.nvdec_plan``: one read alone, and ``--frames`` frames
of reads queued behind each other). A plan's figure, not a GPU's: the decoder's own share
comes from ``decode_readers.py``'s ``decoder_busy_share`` on the device.

    .venv/bin/python benchmarks/nvdec_plan.py --gop 60 --slice 512 --sessions 4,8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chord_core.media.gop import plan_gops, split_reads  # noqa: E402
from chord_core.media.nvdec_plan import Lane, assign, busy_share  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gop", type=int, default=60, help="frames from keyframe to keyframe")
    ap.add_argument("--slice", type=int, default=512, help="frames a read")
    ap.add_argument("--frames", type=int, default=9000, help="frames of the queued reads")
    ap.add_argument("--sessions", default="4,8")
    args = ap.parse_args()
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
