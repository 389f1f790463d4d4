"""Long-video benchmark: peak host memory and where the time goes, for chapters and grounding.

CPU (the memory figure of issue 15; test model, one model in this process):

    .venv/bin/python benchmarks/long_video.py --hours 3 --size 1920x1080 --fps 10

makes a looped low-motion H.264 clip (one segment encoded once, its packets repeated), then
runs ``chapters`` on it (keyframe scan, chunk descriptions, chapter and summary reduces) and
prints peak RSS (sampled every 0.1 s, and the kernel's high-water mark), the time of each
stage, and a decode-only pass over exactly the frames the chunk jobs read, beside the model
time of the same run.

GPU (the 1-hour moonshot; run on the GPU host, worker processes on every GPU):

    python -m chord_core make-tiny-model /data/q7b --shape 7b --device cuda
    python benchmarks/long_video.py --device cuda --model /data/q7b --hours 1 \
        --size 1280x720 --fps 30 --ground-fps 1 --task both

grounds the clip at 1 fps (3,600 frames) and makes chapters, through a JobManager over the
visible GPUs, with GPU utilisation from Chord's own sampler during each task.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class PeakRss(threading.Thread):
    """Largest resident set of this process plus its children, sampled."""

    def __init__(self, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        import psutil

        self.proc, self.interval, self.peak, self.stop = psutil.Process(), interval_s, 0, False

    def run(self) -> None:
        while not self.stop:
            try:
                rss = self.proc.memory_info().rss + sum(
                    c.memory_info().rss for c in self.proc.children(recursive=True))
            except Exception:  # noqa: BLE001 — a child that just exited
                rss = 0
            self.peak = max(self.peak, rss)
            time.sleep(self.interval)


def _gpu_util() -> tuple[object, dict]:
    from chord_core.gpus.sampler import GpuSampler

    sampler = GpuSampler(interval_s=0.5, history_s=3600)
    if sampler.available:
        sampler.start()
    return sampler, {}


def _util_summary(sampler) -> dict:
    if not sampler.available:
        return {"gpu_util": f"not available ({sampler.reason})"}
    sampler.stop()
    out = {}
    for gpu, samples in sampler.history().items():
        vals = [s.utilization_pct for s in samples if s.utilization_pct is not None]
        out[f"gpu{gpu}_util_mean_pct"] = round(sum(vals) / max(1, len(vals)), 1)
    return out


def decode_only(info, plans) -> tuple[float, int]:
    """Read exactly the frames the jobs read (same reader, same sizes), keep none."""
    from chord_core.media.video import read_frames_timed

    t0, n = time.perf_counter(), 0
    for plan in plans:
        frames, _, _ = read_frames_timed(info.path, plan.frame_indices, plan.input_wh)
        n += len(frames)
        del frames
    return time.perf_counter() - t0, n


def executor(args):
    from chord_core.config import ModelConfig

    if args.device == "cpu":
        from chord_core.runtime.cluster import in_process_manager

        return in_process_manager(ModelConfig(model=args.model, device="cpu", compile=False)), 2
    from chord_core.config import model_config_from_env
    from chord_core.runtime.cluster import start_manager
    from chord_core.runtime.parallel_config import load_parallel_config

    parallel = load_parallel_config(None, overrides={"batch_size_per_gpu": args.batch_size})
    manager, plan = start_manager(model_config_from_env(model=args.model), parallel)
    t0 = time.perf_counter()
    manager.wait_ready(1800)
    print(f"workers ready in {time.perf_counter() - t0:.1f} s: "
          + "; ".join(plan.lines), file=sys.stderr)
    return manager, len(plan.specs) * args.batch_size


def run_chapters(args, ex, width, store, info, key, settings) -> dict:
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chapters import ChaptersRun
    from chord_core.longvideo.chunks import Chunk, chunk_plan

    t0 = time.perf_counter()
    doc = ChaptersRun(ex, store, info, key, settings, args.model, in_flight=width,
                      on_progress=lambda e: print(f"  {e.message}", file=sys.stderr))()
    wall = time.perf_counter() - t0
    sampling = SamplingConfig(fps=settings.describe_fps, max_frames=settings.describe_max_frames)
    plans = [chunk_plan(info, Chunk.from_dict(c), "describe", sampling) for c in doc.chunks]
    dec_s, frames = decode_only(info, plans)
    model_s = doc.timing.get("map_s", 0) + doc.timing.get("reduce_s", 0) + \
        doc.timing.get("summary_s", 0)
    return {"task": "chapters", "wall_s": round(wall, 2), "scan": doc.scan["mode"],
            "scan_s": doc.timing.get("scan_s"), "chunks": len(doc.chunks),
            "chapters": len(doc.chapters), "jobs_s (map+reduce+summary)": round(model_s, 2),
            "decode_only_s": round(dec_s, 2), "decode_only_frames": frames,
            "decode_only / wall": round(dec_s / wall, 3),
            "scan / wall": round(doc.timing.get("scan_s", 0) / wall, 3)}


def run_ground(args, ex, width, store, info, key, settings) -> dict:
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chunks import slice_plan
    from chord_core.longvideo.ground import ground_long, ground_plan

    t0 = time.perf_counter()
    res = ground_long(ex, store, info, key, "the yellow square", settings, args.model,
                      sampling=SamplingConfig(), in_flight=width, max_new_tokens=args.tokens,
                      on_progress=lambda e: print(f"  {e.message}", file=sys.stderr))
    wall = time.perf_counter() - t0
    plans = slice_plan(ground_plan(info, settings, SamplingConfig()),
                       settings.ground_chunk_frames)
    dec_s, frames = decode_only(info, plans)
    return {"task": "ground", "wall_s": round(wall, 2), "frames": res.sampling.num_frames,
            "frames_per_s": round(res.sampling.num_frames / wall, 1),
            "model_generate_s (sum over workers)": round(res.timing.generate_s, 2),
            "decode_in_jobs_s (sum over workers)": round(res.timing.decode_s, 2),
            "decode_only_s": round(dec_s, 2), "decode_only_frames": frames,
            "decode_only / wall": round(dec_s / wall, 3), "tracks": len(res.tracks)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--size", default="1920x1080")
    ap.add_argument("--fps", type=float, default=10.0, help="the clip's frame rate")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", default="test")
    ap.add_argument("--task", choices=("chapters", "ground", "both"), default="chapters")
    ap.add_argument("--chunk-s", type=float, default=600.0)
    ap.add_argument("--chapter-s", type=float, default=1800.0)
    ap.add_argument("--cuts", default="keyframes")
    ap.add_argument("--ground-fps", type=float, default=1.0)
    ap.add_argument("--tokens", type=int, default=64, help="grounding tokens per frame")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--clip", default=None, help="use this clip instead of making one")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()

    from chord_core.longvideo.settings import LongVideoSettings
    from chord_core.media.content_keys import file_hash
    from chord_core.media.probe import probe
    from chord_core.runtime.store import Store
    from chord_core.testing.scenes import make_looped_clip

    work = Path(args.workdir or tempfile.mkdtemp(prefix="chord-longvideo-"))
    work.mkdir(parents=True, exist_ok=True)
    w, h = (int(v) for v in args.size.split("x"))
    t0 = time.perf_counter()
    clip = Path(args.clip) if args.clip else make_looped_clip(
        work / f"long_{args.hours:g}h_{h}p.mp4", total_s=args.hours * 3600, fps=args.fps,
        size_wh=(w, h))[0]
    make_s = time.perf_counter() - t0
    rss = PeakRss()
    rss.start()
    info = probe(clip)
    key = file_hash(clip)
    settings = LongVideoSettings(chunk_s=args.chunk_s, max_chunk_s=max(180, args.chunk_s),
                                 chapter_s=args.chapter_s, cuts=args.cuts,
                                 ground_fps=args.ground_fps, max_new_tokens=128,
                                 describe_max_frames=8)
    store = Store(work / "chord.sqlite3")
    sampler, _ = _gpu_util() if args.device == "cuda" else (None, None)
    ex, width = executor(args)
    out = {"clip": str(clip), "clip_s": round(info.duration_s, 1), "frames": info.frame_count,
           "size": f"{info.width}x{info.height}", "clip_bytes": clip.stat().st_size,
           "make_clip_s": round(make_s, 1), "device": args.device, "model": args.model,
           "in_flight_jobs": width, "runs": []}
    try:
        if args.task in ("chapters", "both"):
            out["runs"].append(run_chapters(args, ex, width, store, info, key, settings))
        if args.task in ("ground", "both"):
            out["runs"].append(run_ground(args, ex, width, store, info, key, settings))
    finally:
        ex.shutdown()
        rss.stop = True
        rss.join()
    if sampler is not None:
        out.update(_util_summary(sampler))
    out["peak_rss_mib (sampled, with children)"] = round(rss.peak / 2**20, 1)
    out["maxrss_mib (kernel high-water mark, this process)"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
