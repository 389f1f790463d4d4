"""Memory of a request's images in a worker (issue 25): the decode of ``--count`` PNGs of
``--side``² pixels as an entail batch does it (4 reader threads, ``entail_batch.READERS``),
each image planned (``image_info``) and read at its plan's input size (``read_image``), the
frames held until the batch is done. Each case runs in a fresh process; the figure is the
peak RSS it added (``ru_maxrss``), printed as JSON.

    python benchmarks/image_memory.py                # the caps' worst request vs. issue 25's
    python benchmarks/image_memory.py --count 4 --side 8000 --no-caps

The caps (``CHORD_MAX_IMAGE_PIXELS``, ``CHORD_MAX_REQUEST_PIXELS``) refuse larger images
before any pixel is decoded: by default 4 images of 4096² is the most one request holds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _make_png(path: Path, side: int) -> None:
    """A big PNG that is small on disk: flat grey with a noisy corner (it still decodes to
    ``side``² RGB pixels)."""
    import numpy as np
    from PIL import Image

    img = np.full((side, side, 3), 128, dtype=np.uint8)
    img[:64, :64] = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(img).save(path, "PNG", compress_level=1)


def _measure(count: int, side: int) -> dict:
    """In this process: plan and read ``count`` images, holding the frames; peak RSS."""
    from chord_core.config import SamplingConfig
    from chord_core.media.images import image_info, read_image
    from chord_core.media.sampling import plan_sampling

    folder = Path(tempfile.mkdtemp(prefix="chord-imgmem-"))
    paths = [folder / f"{k}.png" for k in range(count)]
    for p in paths:
        _make_png(p, side)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def read(p: Path):
        info = image_info(p, decode=False)
        plan = plan_sampling(info, "entail", SamplingConfig())
        return read_image(p, plan.input_wh)

    with ThreadPoolExecutor(4) as pool:
        frames = list(pool.map(read, paths))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for p in paths:
        p.unlink()
    folder.rmdir()
    return {"count": count, "side": side, "pixels_total": count * side * side,
            "held_frame_shape": list(frames[0].shape),
            "peak_added_mib": round((peak - before) / 1024, 1)}


def _case(count: int, side: int, caps: bool) -> dict:
    env = dict(os.environ)
    if not caps:
        env.update(CHORD_MAX_IMAGE_PIXELS=str(side * side),
                   CHORD_MAX_REQUEST_PIXELS=str(count * side * side))
    proc = subprocess.run([sys.executable, __file__, "--inner", str(count), str(side)],
                          env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"count": count, "side": side, "refused": proc.stderr.strip().splitlines()[-1]}
    return {**json.loads(proc.stdout), "caps": "lifted" if not caps else "default"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int)
    ap.add_argument("--side", type=int)
    ap.add_argument("--no-caps", action="store_true", help="lift the caps to fit the case")
    ap.add_argument("--inner", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        print(json.dumps(_measure(*args.inner)))
        return
    if args.count and args.side:
        cases = [(args.count, args.side, not args.no_caps)]
    else:  # issue 25's request (caps lifted), refused by default; the caps' worst request
        cases = [(4, 8000, False), (4, 8000, True), (4, 4096, True)]
    for count, side, caps in cases:
        print(json.dumps(_case(count, side, caps)), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
