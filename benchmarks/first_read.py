"""Where a fresh process's first read of a long clip goes (issue 34: a cold
``chapters hour.mp4``'s first two chunks spent 10.6 s in decode on an H100, later ones
0.15 s). In one new process, as a worker reads the chapters' chunks: torch and CUDA up,
the probe, the packet index, then the first chunks' plans read one after another through
the reader chain, each with its reader's own stats; the first read also under cProfile
(the caller's thread: the index, the sessions' set-up; the sessions' threads are in
``stats``).

    python3 benchmarks/first_read.py --clip /tmp/real_hour.mp4 --out first_read.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clip", required=True)
    ap.add_argument("--chunks", type=int, default=4, help="chunks read, one after another")
    ap.add_argument("--device", default="cuda:0", help="the model's device (cpu: none)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out: dict = {"clip": args.clip}
    t = time.perf_counter()
    import torch

    out["import_torch_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    if args.device.startswith("cuda"):
        torch.zeros(1, device=args.device)
    out["cuda_init_s"] = round(time.perf_counter() - t, 3)

    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chunks import chunk_plan, make_chunks, snap_plan
    from chord_core.longvideo.settings import LongVideoSettings
    from chord_core.media.packet_index import packet_index
    from chord_core.media.probe import probe
    from chord_core.media.read_ahead import read_plan_full

    t = time.perf_counter()
    info = probe(args.clip)
    out["probe_s"] = round(time.perf_counter() - t, 3)
    s = LongVideoSettings()
    sampling = SamplingConfig(fps=s.describe_fps, max_frames=s.describe_max_frames)
    chunks = make_chunks(info, (), s)[:args.chunks]
    t = time.perf_counter()
    plans = [snap_plan(info, chunk_plan(info, c, "describe", sampling), c.read_first,
                       c.end_frame) for c in chunks]  # the parent's part (index built here)
    out["plans_s (index + snap)"] = round(time.perf_counter() - t, 3)
    import chord_core.media.packet_index as pi

    pi._cache.clear()  # the worker has no index of its own: build it again in the read
    reads = []
    device = None if args.device == "cpu" else args.device
    for k, plan in enumerate(plans):
        prof = cProfile.Profile() if k == 0 else None
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        got = read_plan_full(info, plan, model_device=device)
        if prof is not None:
            prof.disable()
        if hasattr(got.frames, "is_cuda") and got.frames.is_cuda:
            torch.cuda.synchronize()
        row = {"chunk": k, "frames": len(got.indices), "wh": list(plan.input_wh),
               "wall_s": round(time.perf_counter() - t, 3), "reader": got.reader,
               "stats": {a: b for a, b in got.stats.items()
                         if not isinstance(b, (int, float)) or b}}
        if prof is not None:
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
            row["profile_top"] = [ln for ln in buf.getvalue().splitlines() if ln.strip()][:40]
        reads.append(row)
        print(json.dumps({k2: v for k2, v in row.items() if k2 != "profile_top"}), flush=True)
    t = time.perf_counter()
    packet_index(args.clip)  # cached by now (the first read built it)
    out["index_cached_s"] = round(time.perf_counter() - t, 4)
    out["reads"] = reads
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print("\n".join(reads[0].get("profile_top", [])))
    print(json.dumps({k: v for k, v in out.items() if k != "reads"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
