"""Long-video benchmark: peak host memory and where the time goes, for chapters and grounding.

CPU (the memory figure of issue 15; test model, one model in this process):

    .venv/bin/python benchmarks/long_video.py --hours 3 --size 1920x1080 --fps 10

makes a looped low-motion H.264 clip (one segment encoded once, its packets repeated), then
runs ``chapters`` on it (keyframe scan, chunk descriptions, chapter and summary reduces) and
prints peak RSS (sampled every 0.1 s, and the kernel's high-water mark), the time of each
stage, and a decode-only pass over exactly the frames the chunk jobs read, beside the model
time of the same run.

GPU (the 1-hour moonshot; run on the GPU host, worker processes on every GPU):

    python -m chord_core make-tiny-model /tmp/chord-rand-7b --shape 7b --device cuda
    python benchmarks/long_video.py --device cuda --model /tmp/chord-rand-7b --hours 1 \
        --size 1280x720 --fps 30 --task both --chunk-s 60 --chapter-s 300 \
        --frames-per-chunk 16 --chunk-tokens 192 --warmup --out r.json

grounds the clip at 1 fps (3,600 frames) with ``ground-long``'s defaults (448×252 frames, 64
answer tokens, 32 frames a generate call: ``longvideo/settings.GROUND_LONG_*``, one source
for both; issue 34's figures before this used ``--tokens 32``) and makes chapters, through a
JobManager over the visible GPUs, with GPU utilisation from Chord's own sampler during each
task (mean and median of the samples inside the task's own wall time). ``--warmup`` runs one grounding and
one describe job first (untimed: the fast decoder's graphs for these shapes). ``--clip``
takes a clip made elsewhere (a host without PyAV cannot write one; its scan is then
``fixed`` windows: OpenCV cannot skip to keyframes). ``--decode-only-fraction 0.25``
times the decode-only pass on a quarter of the jobs' frames (after one job read untimed:
the reader's start) and scales it up.
``--out`` writes the JSON after every stage (a run cut short keeps what it measured).
``--ground-batch 32,64,128`` grounds the clip once per batch (frames a generate call), each
row with chunks of at least that many frames.

``--reader nvdec|cpu-pool|default|auto`` sets ``CHORD_READER`` for the workers (and the
decode-only pass, which reads with that reader alone and reports frames/s); each run reports
which readers its jobs' results say ran. ``--no-snap`` keeps chapters' samples where the
plan put them (default: moved to the nearest keyframe, as the product does). The read-ahead
queue bound (``media.read_ahead.READ_AHEAD_BYTES`` per worker) and one chunk's frame bytes
are printed beside them.
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
        try:
            import psutil

            self.proc = psutil.Process()
        except ImportError:  # the kernel's high-water mark is still reported
            self.proc = None
        self.interval, self.peak, self.stop = interval_s, 0, False

    def run(self) -> None:
        while not self.stop and self.proc is not None:
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


def _util_summary(sampler, t0: float | None = None, t1: float | None = None) -> dict:
    """Mean / median utilisation and peak memory per GPU over samples in [t0, t1]."""
    if sampler is None:
        return {}
    if not sampler.available:
        return {"gpu_util": f"not available ({sampler.reason})"}
    out = {}
    for gpu, samples in sampler.history().items():
        inside = [s for s in samples if (t0 is None or s.t >= t0) and (t1 is None or s.t <= t1)]
        vals = sorted(s.utilization_pct for s in inside if s.utilization_pct is not None)
        mem = [s.memory_used_mib for s in inside if s.memory_used_mib is not None]
        if not vals:
            continue
        out[f"gpu{gpu}_util_mean_pct"] = round(sum(vals) / len(vals), 1)
        out[f"gpu{gpu}_util_median_pct"] = vals[len(vals) // 2]
        out[f"gpu{gpu}_samples"] = len(vals)
        out[f"gpu{gpu}_mem_max_mib"] = round(max(mem)) if mem else None
    return out


def decode_only(info, plans, fraction: float = 1.0, reader: str = "auto") -> dict:
    """Read exactly the frames the jobs read (same reader, same sizes, job by job), keep
    none; with ``fraction`` < 1 only a share of the jobs, scaled up to all of them. A share
    leaves out the reader's start (NVDEC's sessions, the pool's processes): the first job is
    read untimed first (one job with NVDEC's start, scaled up 29 times, read as 123 s for
    an hour whose jobs waited 1.2 s on their frames, 2026-12-07)."""
    from chord_core.media.readers import ReadRequest, read_frames_auto, reader_chain

    k = max(1, round(len(plans) * fraction))
    warm = 1 if k < len(plans) else 0
    chain = reader_chain(reader)
    for plan in plans[:warm]:
        read_frames_auto(ReadRequest(info, plan.frame_indices, plan.input_wh), chain)
    t0, n, ran = time.perf_counter(), 0, set()
    for plan in plans[warm:warm + k]:
        got = read_frames_auto(ReadRequest(info, plan.frame_indices, plan.input_wh), chain)
        n += len(got.indices)
        ran.add(got.reader)
        del got
    took = time.perf_counter() - t0
    out = {"decode_only_s": round(took * len(plans) / k, 2), "decode_only_frames": n,
           "decode_only_frames_per_s": round(n / took, 1) if took > 0 else None,
           "decode_only_reader": sorted(ran), "decode_only_jobs": f"{k} of {len(plans)}",
           "decode_only_untimed_first_jobs": warm}
    if k < len(plans):
        out["decode_only_measured_s"] = round(took, 2)
    return out


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
    from chord_core.longvideo.settings import chunks_in_flight

    # what the CLI, the service and the app queue: two batches of the workers' slots
    return manager, chunks_in_flight(len(plan.specs) * args.batch_size)


def _say(e) -> None:
    print(f"  {e.elapsed_s:6.1f}s {e.message}", file=sys.stderr, flush=True)


def run_chapters(args, ex, width, store, info, key, settings, sampler) -> dict:
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chapters import ChaptersRun
    from chord_core.longvideo.chunks import Chunk, chunk_plan

    t0, w0 = time.perf_counter(), time.time()
    run = ChaptersRun(ex, info, key, settings, args.model, in_flight=width,
                      on_progress=_say)
    doc = run()
    ran = sorted({r.sampling.reader for r in getattr(run, "_results", {}).values()})
    wall, w1 = time.perf_counter() - t0, time.time()
    from chord_core.longvideo.chunks import snap_plan

    sampling = SamplingConfig(fps=settings.describe_fps, max_frames=settings.describe_max_frames)
    chunks = [Chunk.from_dict(c) for c in doc.chunks]
    plans = [chunk_plan(info, c, "describe", sampling) for c in chunks]
    if settings.snap_keyframes:
        plans = [snap_plan(info, p, c.read_first, c.end_frame) for p, c in zip(plans, chunks)]
    dec = decode_only(info, plans, args.decode_only_fraction, args.reader)
    moves = [abs(m) for p in plans for m in p.keyframe_moves_s]
    model_s = doc.timing.get("map_s", 0) + doc.timing.get("reduce_s", 0) + \
        doc.timing.get("summary_s", 0)
    return {"task": "chapters", "wall_s": round(wall, 2), "scan": doc.scan["mode"],
            "scan_s": doc.timing.get("scan_s"), "chunks": len(doc.chunks),
            "chapters": len(doc.chapters),
            "stage_s": {k: round(v, 2) for k, v in doc.timing.items()},
            "jobs_s (map+reduce+summary)": round(model_s, 2), **dec,
            "decode_only / wall": round(dec["decode_only_s"] / wall, 3),
            "scan / wall": round(doc.timing.get("scan_s", 0) / wall, 3),
            "frames_per_chunk": plans[0].num_frames if plans else 0,
            "chunk_input_wh": list(plans[0].input_wh) if plans else None,
            "snap_keyframes": settings.snap_keyframes, "readers (results)": ran,
            "keyframe_move_s (mean, max)": [round(sum(moves) / len(moves), 3),
                                            round(max(moves), 3)] if moves else None,
            **_queue_memory(plans),
            **_util_summary(sampler, w0, w1)}


# one target a grounding row: a row at another batch is a new run, not answered from the
# store (the content key holds the target, not the batch); each colour is one token of Qwen's
# vocabulary, so every row's prompt is as long as the first's
GROUND_TARGETS = ("the yellow square", "the green square", "the white square",
                  "the black square", "the brown square", "the orange square")


def ground_settings(settings, batch: int):
    """``settings`` with chunks of at least ``batch`` frames (a generate call never holds
    more frames than its chunk has)."""
    from dataclasses import replace

    return replace(settings, ground_chunk_frames=max(settings.ground_chunk_frames, batch))


def run_ground(args, ex, width, store, info, key, settings, sampler, *, batch: int,
               target: str) -> dict:
    from chord_core.longvideo.chunks import slice_plan
    from chord_core.longvideo.ground import ground_long, ground_plan

    settings = ground_settings(settings, batch)
    t0, w0 = time.perf_counter(), time.time()
    res = ground_long(ex, info, key, target, settings, args.model,
                      sampling=ground_sampling(args), in_flight=width,
                      max_new_tokens=args.tokens, batch_size=batch, on_progress=_say)
    wall, w1 = time.perf_counter() - t0, time.time()
    plans = slice_plan(ground_plan(info, settings, ground_sampling(args)),
                       settings.ground_chunk_frames)
    dec = decode_only(info, plans, args.decode_only_fraction, args.reader)
    return {"task": "ground", "wall_s": round(wall, 2), "frames": res.sampling.num_frames,
            "frames_per_s": round(res.sampling.num_frames / wall, 1),
            "input_wh": list(res.sampling.input_wh), "jobs": len(plans),
            "tokens_per_frame_max": args.tokens, "batch": batch,
            "chunk_frames": settings.ground_chunk_frames, "target": target,
            "model_generate_s (sum over workers)": round(res.timing.generate_s, 2),
            "preprocess_s (sum over workers)": round(res.timing.preprocess_s, 2),
            "decode_in_jobs_s (sum over workers)": round(res.timing.decode_s, 2), **dec,
            "decode_only / wall": round(dec["decode_only_s"] / wall, 3),
            "tracks": len(res.tracks), "readers (results)": res.sampling.reader,
            **_queue_memory(plans), **_util_summary(sampler, w0, w1)}


def _queue_memory(plans) -> dict:
    """The read-ahead bound per worker and what one job's frames take."""
    from chord_core.media.read_ahead import READ_AHEAD_BYTES

    one = max((p.num_frames * p.input_wh[0] * p.input_wh[1] * 3 for p in plans), default=0)
    return {"read_ahead_bound_mib_per_worker": round(READ_AHEAD_BYTES / 2**20),
            "one_job_frames_mib": round(one / 2**20, 1),
            "jobs_held_ahead_at_most": READ_AHEAD_BYTES // one if one else None}


def ground_sampling(args):
    from chord_core.longvideo.settings import ground_long_sampling

    return ground_long_sampling(args.ground_max_pixels)


def warm_up(args, ex, info, settings) -> dict:
    """One grounding job (a chunk) at each grounding batch and one describe job, untimed in
    the runs."""
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import SamplingConfig
    from chord_core.longvideo.chunks import chunk_plan, make_chunks, slice_plan
    from chord_core.longvideo.ground import ground_plan
    from chord_core.runtime.jobs import JobSpec

    t0 = time.perf_counter()
    chunk = make_chunks(info, (), settings)[0]
    dplan = chunk_plan(info, chunk, "describe", SamplingConfig(
        fps=settings.describe_fps, max_frames=settings.describe_max_frames))
    ids = [ex.submit(JobSpec(AnalysisRequest(info.path, "describe", "", SamplingConfig(),
                                             settings.max_new_tokens),
                             model=args.model, info=info, plan=dplan, label="warm-up"))]
    for b in args.ground_batch if args.task in ("ground", "both") else ():
        piece = slice_plan(ground_plan(info, ground_settings(settings, b), ground_sampling(args)),
                           max(settings.ground_chunk_frames, b))[0]
        ids.append(ex.submit(JobSpec(AnalysisRequest(info.path, "ground", f"warm up {b}",
                                                     ground_sampling(args), args.tokens,
                                                     batch_size=b),
                                     model=args.model, info=info, plan=piece,
                                     label="warm-up")))
    for job in ids:
        while not ex.status(job).state.finished:
            time.sleep(0.05)
    return {"warmup_s": round(time.perf_counter() - t0, 2)}


def _batches(text: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}") from None
    if not out or min(out) < 1 or len(out) > len(GROUND_TARGETS):
        raise argparse.ArgumentTypeError(
            f"1 to {len(GROUND_TARGETS)} batches, each at least 1, e.g. 32,64,128")
    return out


def parser() -> argparse.ArgumentParser:
    """The benchmark's options; grounding's defaults are the product's long-clip defaults
    (``chord_core.longvideo.settings.GROUND_LONG_*``, what ``ground-long`` runs)."""
    from chord_core.longvideo.settings import (
        GROUND_LONG_BATCH,
        GROUND_LONG_MAX_PIXELS,
        GROUND_LONG_TOKENS,
    )

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
    ap.add_argument("--tokens", type=int, default=GROUND_LONG_TOKENS,
                    help="grounding tokens per frame (default: ground-long's)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--ground-batch", type=_batches, default=[GROUND_LONG_BATCH],
                    help="frames per generate call in grounding jobs (default: ground-long's); "
                         "a list (32,64,128) grounds the clip once per batch, each with chunks "
                         "of at least that many frames and its own target (no row answered "
                         "from another's stored chunks)")
    ap.add_argument("--frames-per-chunk", type=int, default=8)
    ap.add_argument("--describe-fps", type=float, default=None,
                    help="sampling rate of a chunk description (default: the product's); "
                         "VSS density is --chunk-s 10 --frames-per-chunk 20 --describe-fps 2")
    ap.add_argument("--chunk-tokens", type=int, default=128,
                    help="tokens per chunk description and reduce answer")
    ap.add_argument("--ground-max-pixels", type=int, default=GROUND_LONG_MAX_PIXELS,
                    help="pixel cap of a grounding frame (default: ground-long's)")
    ap.add_argument("--warmup", action="store_true")
    ap.add_argument("--decode-only-fraction", type=float, default=1.0)
    ap.add_argument("--clip", default=None, help="use this clip instead of making one")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--reader", default="auto", choices=("auto", "nvdec", "cpu-pool", "default"),
                    help="frame reader of the workers and the decode-only pass (CHORD_READER)")
    ap.add_argument("--no-snap", action="store_true",
                    help="chapters' samples stay where planned (default: nearest keyframe)")
    ap.add_argument("--out", default=None, help="also write the JSON here, after every stage")
    return ap


def main() -> int:
    args = parser().parse_args()

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
    cuts = args.cuts
    try:
        import av  # noqa: F401
    except ImportError:
        if cuts != "fixed":
            print(f"note: no PyAV here: --cuts {cuts} becomes fixed (OpenCV cannot skip to "
                  "keyframes)", file=sys.stderr)
        cuts = "fixed"
    settings = LongVideoSettings(chunk_s=args.chunk_s, max_chunk_s=max(180, args.chunk_s),
                                 min_chunk_s=min(10.0, args.chunk_s),
                                 chapter_s=args.chapter_s, cuts=cuts,
                                 ground_fps=args.ground_fps, max_new_tokens=args.chunk_tokens,
                                 describe_max_frames=args.frames_per_chunk,
                                 snap_keyframes=not args.no_snap,
                                 **({"describe_fps": args.describe_fps}
                                    if args.describe_fps else {}))
    store = Store(work / "chord.sqlite3")
    sampler, _ = _gpu_util() if args.device == "cuda" else (None, None)
    out = {"clip": str(clip), "clip_s": round(info.duration_s, 1), "frames": info.frame_count,
           "size": f"{info.width}x{info.height}", "clip_bytes": clip.stat().st_size,
           "make_clip_s": round(make_s, 1), "device": args.device, "model": args.model,
           "cuts": cuts, "runs": []}

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=2))

    import os

    os.environ["CHORD_READER"] = args.reader  # the workers' reader (they inherit it)
    out["reader"] = args.reader
    t0 = time.perf_counter()
    ex, width = executor(args)
    out["workers_ready_s"], out["in_flight_jobs"] = round(time.perf_counter() - t0, 1), width
    save()
    try:
        if args.warmup:
            out.update(warm_up(args, ex, info, settings))
            save()
        if args.task in ("ground", "both"):
            for target, batch in zip(GROUND_TARGETS, args.ground_batch):
                out["runs"].append(run_ground(args, ex, width, store, info, key, settings,
                                              sampler, batch=batch, target=target))
                save()
        if args.task in ("chapters", "both"):
            out["runs"].append(run_chapters(args, ex, width, store, info, key, settings,
                                            sampler))
            save()
    finally:
        ex.shutdown()
        rss.stop = True
        rss.join()
        if sampler is not None and sampler.available:
            sampler.stop()
    out["peak_rss_mib (sampled, with children)"] = round(rss.peak / 2**20, 1)
    out["maxrss_mib (kernel high-water mark, this process)"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    save()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
