"""Unique photographs for the entailment benchmarks, cut from real ones.

OFA-VE's data (SNLI-VE) are Flickr30k photographs: JPEGs of at most 500 pixels a side. The
benchmarks' first images were 448 × 448 PNGs of random noise: ≈ 600 KB each, which no camera
makes and no codec shrinks, so a 32-task request carried ≈ 26 MB of base64. This module makes
the photographic kind: each image a different crop of one of the photographs Debian's
``opencv-doc`` ships (``SOURCE_DIR``; without installing it: ``apt-get download opencv-doc &&
dpkg -x opencv-doc_*.deb DIR``), 500 × 375 or 375 × 500, saved as JPEG at quality 95 (384 of
them: 77 KB each on average, so a 32-task request is ≈ 3.3 MB). No two images are the same
bytes, so the service's content-key cache answers none of them; the same ``seed`` gives the
same images.

    python3 benchmarks/photos.py --n 384 --out /tmp/chord-photos   # prints the sizes
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SOURCE_DIR = Path("/usr/share/doc/opencv-doc/examples/data")
# the colour photographs among opencv-doc's sample data (not drawings, charts or text)
SOURCES = ("aero1.jpg", "aloeL.jpg", "apple.jpg", "baboon.jpg", "board.jpg", "building.jpg",
           "butterfly.jpg", "ela_original.jpg", "fruits.jpg", "home.jpg", "leuvenA.jpg",
           "leuvenB.jpg", "licenseplate_motion.jpg", "messi5.jpg", "orange.jpg",
           "squirrel_cls.jpg")
LONG_SIDE, SHORT_SIDE = 500, 375
QUALITY = 95


def sources(folder: Path = SOURCE_DIR) -> list[Path]:
    """The source photographs found in ``folder``; a clear error when there are none."""
    found = [folder / name for name in SOURCES if (folder / name).is_file()]
    if not found:
        raise SystemExit(f"no source photographs in {folder}: install Debian's opencv-doc, or "
                         "`apt-get download opencv-doc && dpkg -x opencv-doc_*.deb DIR` and "
                         "pass DIR/usr/share/doc/opencv-doc/examples/data")
    return found


def make_photos(folder: Path, n: int, source_dir: Path = SOURCE_DIR, seed: int = 0
                ) -> list[str]:
    """``n`` unique JPEGs in ``folder`` (made once; kept for the next run), their paths."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    images = [Image.open(p).convert("RGB") for p in sources(source_dir)]
    paths = []
    for i in range(n):
        img = images[i % len(images)]
        # every draw is made whether or not the file exists, so a file's crop never depends
        # on which others were made before
        portrait = rng.random() < 0.25
        frac = rng.uniform(0.55, 1.0)
        fx, fy, flip = rng.random(), rng.random(), rng.random() < 0.5
        p = folder / f"photo{seed}_{i}.jpg"
        paths.append(str(p))
        if p.exists():
            continue
        out_w, out_h = (SHORT_SIDE, LONG_SIDE) if portrait else (LONG_SIDE, SHORT_SIDE)
        w, h = img.size
        scale = min(w / out_w, h / out_h) * frac  # the crop keeps the output's aspect
        cw, ch = max(1, round(out_w * scale)), max(1, round(out_h * scale))
        x, y = round(fx * (w - cw)), round(fy * (h - ch))
        crop = img.crop((x, y, x + cw, y + ch)).resize((out_w, out_h), Image.Resampling.LANCZOS)
        if flip:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        crop.save(p, "JPEG", quality=QUALITY)
    return paths


def describe(paths: list[str]) -> dict:
    """What a set of images is, for a benchmark's result."""
    sizes = [Path(p).stat().st_size for p in paths]
    return {"images": len(paths), "image_bytes_mean": round(sum(sizes) / max(1, len(sizes))),
            "image_bytes_max": max(sizes, default=0),
            "images_unique": len({Path(p).read_bytes() for p in paths}) == len(paths)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=384)
    ap.add_argument("--out", default="/tmp/chord-photos")
    ap.add_argument("--sources", default=str(SOURCE_DIR))
    args = ap.parse_args()
    paths = make_photos(Path(args.out), args.n, Path(args.sources))
    print(json.dumps(describe(paths), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
