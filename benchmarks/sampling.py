"""W4 (issue 5): the CPU side — sampling 2 fps from a long H.264 file.

    python benchmarks/sampling.py                       # 10-minute 720p30 H.264 clip
    python benchmarks/sampling.py --minutes 0.3 --out x.json   # seconds (the test suite)
    python benchmarks/sampling.py --clip real_10min.mp4         # real footage (footage.py)

Three ways to get the same frames (2 fps, resized to the size Chord feeds the model), timed
in the same run on the same file, median of ``--repeats``:

* ``decode_every_frame`` — the naive loop: ``cv2.VideoCapture.read()`` on every frame
  (decode + colour conversion of all of them), keeping every 15th;
* ``ours`` — ``chord_core.media.video.read_frames`` with the sampling plan's indices: PyAV with
  threaded decoding (``chord_core.media.av_reader``); once frame indices are proven from the
  timestamps, frames nobody refers to (non-reference B-frames) are not decoded, and only the
  sampled frames are converted, in one swscale pass straight to the model's size (RGB, area
  averaging); OpenCV's grab()/retrieve() is the fallback when PyAV cannot read the file;
* ``ffmpeg`` — ``ffmpeg -i FILE -vf fps=2,scale=W:H:flags=area -f rawvideo -pix_fmt rgb24 -``
  into a pipe, when an ``ffmpeg`` binary is on PATH (reported as unavailable otherwise).

``ours_gop`` reads the same frames keyframe to keyframe through the CPU reader
(``chord_core.media.readers.CpuPoolReader``, one process here so that CPU seconds count it:
the packet index, only the GOPs the samples need, no GOP's tail after its last sample,
non-reference frames skipped); ``ours_keyframes`` reads only the keyframes (one decoded frame
each: what chapters' samples read once they snap to keyframes). ``--ways`` picks ways.

``ours_gop_t1`` is the same read on one decoder with one FFmpeg thread (each process of the
CPU pool gets ``cores / procs`` threads: one on a 2-core machine); ``ours_gop_bidir`` skips
every B-frame not wanted, ``ours_gop_fast`` also the loop filter, and ``bidir_error`` /
``fast_error`` say how far their frames are from ``ours_gop_t1``'s exact ones; ``ffmpeg_t1`` is ffmpeg with
``-threads 1``. ``ours_gop_pool`` is the product's read (``CpuPoolReader`` over the kept
pool of ``max(2, cores)`` decode processes, started before the timing), the pool processes'
CPU read from ``/proc`` and counted. ``ours_gop_threads`` is the same read as a worker runs
it (a worker is daemonic, so the parts run on 2 threads of its own process). The ``_fast``
twins of both read with ``CHORD_DECODE=fast``'s shortcuts.

``ours_opencv_s`` times the same ``read_frames`` call forced onto its OpenCV route (the route
before PyAV), for comparison. Each ``*_s`` (median wall seconds) has a ``*_cpu_s`` twin: median
CPU seconds of one run, threads and the ffmpeg child included, steadier than wall time when
other work shares the machine.

The test clip is written once with PyAV/libx264 (moving shapes over a textured, slowly
panning background, so the decoder has real work) and cached under ``--cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import timed  # noqa: E402


def make_clip(path: Path, minutes: float, size_wh=(1280, 720), fps: int = 30) -> Path:
    """A textured H.264 clip (PyAV + libx264, GOP 250 like x264's default)."""
    if path.exists():
        return path
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size_wh
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 255, (h * 2, w * 2, 3), dtype=np.uint8)
    texture = (texture.astype(np.float32) * 0.35 + 90).astype(np.uint8)
    tmp = path.with_suffix(".part.mp4")
    with av.open(str(tmp), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"preset": "veryfast", "crf": "26", "g": "250"}
        for i in range(int(minutes * 60 * fps)):
            x, y = (i * 3) % w, (i * 2) % h
            frame = texture[y:y + h, x:x + w].copy()
            cx, cy = int(w / 2 + w / 3 * np.sin(i / 40)), int(h / 2 + h / 3 * np.cos(i / 55))
            frame[max(0, cy - 60):cy + 60, max(0, cx - 80):cx + 80] = (40, 200, 60)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    tmp.rename(path)
    return path


def decode_every_frame(path: Path, step: int, size_wh: tuple[int, int]) -> int:
    import cv2

    cap = cv2.VideoCapture(str(path))
    kept, i = 0, 0
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        if i % step == 0:
            cv2.cvtColor(cv2.resize(bgr, size_wh, interpolation=cv2.INTER_AREA),
                         cv2.COLOR_BGR2RGB)
            kept += 1
        i += 1
    cap.release()
    return kept


def ours(path: Path, indices: list[int], size_wh: tuple[int, int],
         backend: str = "auto") -> int:
    from chord_core.media.video import read_frames

    frames, _ = read_frames(path, indices, size_wh, backend=backend)
    return len(frames)


def ours_gop(info, indices: list[int], size_wh: tuple[int, int]) -> int:
    """Keyframe to keyframe (the packet index is scanned afresh each time: its cost counts)."""
    from chord_core.media import packet_index as pi
    from chord_core.media.readers import CpuPoolReader, ReadRequest

    pi._cache.clear()
    got = CpuPoolReader(procs=1).read(ReadRequest(info, tuple(indices), size_wh))
    return len(got.indices)


FRAMES: dict[str, np.ndarray] = {}  # the gop ways' frames, for the pixel error of the fast one


def ours_gop_in(info, indices: list[int], size_wh: tuple[int, int], name: str,
                threads: int = 1, fast: str = "") -> int:
    """Keyframe to keyframe in this process on one decoder with ``threads`` FFmpeg threads
    (1: what each process of the CPU pool gets on a 2-core machine: ``cores / procs``).
    ``fast``: ``bidir`` skips every B-frame not wanted (``BIDIR`` instead of ``NONREF``):
    not exact where a P-frame refers to a B-frame (x264's b-pyramid); ``fast`` also skips
    the loop filter everywhere. ``bidir_error`` / ``fast_error`` say by how much."""
    from chord_core.media import packet_index as pi
    from chord_core.media.gop_reader import AvGopDecoder
    from chord_core.media.readers import CpuPoolReader, ReadRequest

    def make(path: str) -> AvGopDecoder:
        dec = AvGopDecoder(path, threads=threads, fast=fast == "fast")  # CHORD_DECODE=fast
        if fast == "bidir":
            dec.skip_unwanted = "BIDIR"
        return dec

    pi._cache.clear()
    got = CpuPoolReader(procs=1, decoder_factory=make).read(
        ReadRequest(info, tuple(indices), size_wh))
    FRAMES[name] = got.frames
    return len(got.indices)


def fast_error(exact: np.ndarray, fast: np.ndarray) -> dict[str, float]:
    """|fast − exact| over the sampled frames (uint8 levels): mean, the worst frame's mean,
    the 99th percentile of every pixel value."""
    d = np.abs(exact.astype(np.int16) - fast.astype(np.int16))
    per = d.reshape(len(d), -1).mean(axis=1)
    return {"mean_abs": round(float(per.mean()), 3), "worst_frame_mean_abs":
            round(float(per.max()), 3), "p99_abs": float(np.percentile(d[:, ::3, ::3], 99)),
            "frames": len(d)}


def pool_cpu_s() -> float:
    """CPU seconds the CPU decode pool's live processes have used so far (``/proc``)."""
    from chord_core.media import decode_pool

    pool, total = decode_pool._pool, 0.0
    for pid in list(getattr(pool, "_processes", None) or {}):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def ours_gop_pool(info, indices: list[int], size_wh: tuple[int, int], procs: int,
                  fast: bool = False, threads_only: bool = False) -> int:
    """The product's keyframe-to-keyframe read: ``procs`` decode processes of the kept pool
    (``cores / procs`` FFmpeg threads each), frames sent back through pipes; the pool is
    started before the timing (a service keeps it), its processes' CPU counted. ``fast``:
    as with ``CHORD_DECODE=fast``. ``threads_only``: the read as a worker runs it (a worker
    process is daemonic, no children: the parts run on ``procs`` threads of this process,
    no frames through pipes)."""
    from chord_core.media import packet_index as pi
    from chord_core.media.readers import CpuPoolReader, ReadRequest

    pi._cache.clear()
    got = CpuPoolReader(procs=procs, fast=fast, threads_only=threads_only).read(
        ReadRequest(info, tuple(indices), size_wh))
    name = "ours_gop_threads" if threads_only else "ours_gop_pool"
    FRAMES[name + ("_fast" if fast else "")] = got.frames
    return len(got.indices)


def ours_keyframes(info, size_wh: tuple[int, int]) -> int:
    from chord_core.media.packet_index import packet_index

    keys = [k for k in packet_index(info.path).keyframes if k < info.frame_count]
    return ours_gop(info, keys, size_wh)


def ffmpeg(path: Path, fps: float, size_wh: tuple[int, int], binary: str,
           threads: int = 0) -> int:
    w, h = size_wh
    more = ["-threads", str(threads)] if threads else []
    proc = subprocess.run([binary, "-v", "error", *more, "-i", str(path), "-vf",
                           f"fps={fps},scale={w}:{h}:flags=area", "-f", "rawvideo",
                           "-pix_fmt", "rgb24", "-"], capture_output=True, check=True)
    return len(proc.stdout) // (w * h * 3)


def _cpu_s() -> float:
    """CPU seconds used so far by this process and its finished children (ffmpeg)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def measure(res: dict, name: str, fn, repeats: int, others=lambda: 0.0) -> object:
    """``res[name_s]``: median wall seconds; ``res[name_cpu_s]``: median CPU seconds (all
    threads and child processes: robust on a shared machine; ``others()``: CPU seconds so
    far of processes that outlive the run, the decode pool's). Returns ``fn``'s result."""
    cpu: list[float] = []

    def run() -> object:
        cpu0 = _cpu_s() + others()
        out = fn()
        cpu.append(_cpu_s() + others() - cpu0)
        return out

    res[f"{name}_s"], out = timed(run, repeats)
    res[f"{name}_cpu_s"] = sorted(cpu)[len(cpu) // 2]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", default=os.environ.get("CHORD_BENCH_DIR", "/tmp/chord-speed"))
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sampling.json"))
    ap.add_argument("--ways", default="decode_every_frame,ours,ours_opencv,ours_gop,"
                    "ours_keyframes,ffmpeg")
    ap.add_argument("--clip", default=None,
                    help="time this file instead of the synthetic clip (real footage: "
                         "benchmarks/footage.py --minutes 10 --out real_10min.mp4)")
    args = ap.parse_args()
    from chord_core.config import SamplingConfig
    from chord_core.media.probe import probe
    from chord_core.media.sampling import plan_sampling

    clip = Path(args.clip) if args.clip else \
        make_clip(Path(args.cache) / f"w4_{args.minutes:g}min_720p.mp4", args.minutes)
    info = probe(clip)
    step = max(1, round(info.fps / args.fps))
    indices = list(range(0, info.frame_count, step))
    # the size Chord's describe plan gives a 720p clip (frame count aside)
    size_wh = plan_sampling(info, "describe", SamplingConfig(fps=args.fps)).input_wh
    res = {"clip": str(clip), "frames_in_file": info.frame_count, "source_fps": info.fps,
           "size": [info.width, info.height], "sampled_frames": len(indices),
           "output_wh": list(size_wh), "cpu_cores": os.cpu_count()}
    ways = set(args.ways.split(","))
    runs = {"decode_every_frame": lambda: decode_every_frame(clip, step, size_wh),
            "ours": lambda: ours(clip, indices, size_wh),
            "ours_opencv": lambda: ours(clip, indices, size_wh, "opencv"),
            "ours_gop": lambda: ours_gop(info, indices, size_wh),
            "ours_gop_t1": lambda: ours_gop_in(info, indices, size_wh, "ours_gop_t1"),
            "ours_gop_bidir": lambda: ours_gop_in(info, indices, size_wh, "ours_gop_bidir",
                                                  fast="bidir"),
            "ours_gop_fast": lambda: ours_gop_in(info, indices, size_wh, "ours_gop_fast",
                                                 fast="fast"),
            "ours_gop_threads": lambda: ours_gop_pool(info, indices, size_wh, 2,
                                                      threads_only=True),
            "ours_gop_threads_fast": lambda: ours_gop_pool(info, indices, size_wh, 2, True,
                                                           threads_only=True),
            "ours_keyframes": lambda: ours_keyframes(info, size_wh)}
    res["kept"] = {name: measure(res, name, fn, args.repeats)
                   for name, fn in runs.items() if name in ways}
    for name, fast in (("ours_gop_pool", False), ("ours_gop_pool_fast", True)):
        if name not in ways:
            continue
        procs = max(2, os.cpu_count() or 2)
        ours_gop_pool(info, indices[:len(indices) // 8], size_wh, procs)  # starts the pool
        res["kept"][name] = measure(
            res, name, lambda: ours_gop_pool(info, indices, size_wh, procs, fast),
            args.repeats, pool_cpu_s)
        res[f"{name}_procs"] = procs
    binary = shutil.which("ffmpeg")
    if "ffmpeg" not in ways:
        binary = None
    if binary:
        n2 = measure(res, "ffmpeg", lambda: ffmpeg(clip, args.fps, size_wh, binary),
                     args.repeats)
        res["kept"]["ffmpeg"] = n2
        if "ffmpeg_t1" in ways:  # the decoder's own cost without frame threads
            res["kept"]["ffmpeg_t1"] = measure(
                res, "ffmpeg_t1", lambda: ffmpeg(clip, args.fps, size_wh, binary, 1),
                args.repeats)
        for name in ("ours", "ours_gop", "ours_gop_t1", "ours_gop_bidir", "ours_gop_fast",
                     "ours_gop_pool", "ours_gop_pool_fast", "ours_gop_threads",
                     "ours_gop_threads_fast", "ours_keyframes"):
            if f"{name}_cpu_s" in res:
                res[f"{name}_cpu_vs_ffmpeg"] = round(res[f"{name}_cpu_s"] / res["ffmpeg_cpu_s"], 3)
    else:
        res["ffmpeg_s"] = None
        res["ffmpeg_note"] = "no ffmpeg binary on PATH"
    for way in ("bidir", "fast", "pool_fast", "threads_fast"):
        if "ours_gop_t1" in FRAMES and f"ours_gop_{way}" in FRAMES:
            res[f"{way}_error"] = fast_error(FRAMES["ours_gop_t1"], FRAMES[f"ours_gop_{way}"])
    if "decode_every_frame_s" in res and "ours_s" in res:
        res["ours_vs_decode_every_frame"] = res["decode_every_frame_s"] / res["ours_s"]
    if "ours_s" in res:
        res["decode_fps_ours"] = info.frame_count / res["ours_s"]
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
