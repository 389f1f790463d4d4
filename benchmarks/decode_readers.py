"""Decode speed by reader on one clip (issue 26): NVDEC through PyNvVideoCodec, OpenCV, PyAV,
and Chord's own reader on the sparse 1 fps frames a grounding job reads.

    python3 benchmarks/decode_readers.py --clip real_hour.mp4 --frames 9000 --decoders 1,2,4,8
    .venv/bin/python benchmarks/decode_readers.py --clip clip.mp4 --frames 300   # CPU readers

* ``opencv`` / ``pyav``: one capture (FFmpeg's own threads), every frame of the first
  ``--frames`` decoded in order and converted to RGB uint8 on the host;
* ``nvdec_xN``: N ``SimpleDecoder`` sessions on GPU 0, one thread each, each decoding the same
  ``--frames`` frames to RGB in device memory (the file is read again from its start when it is
  shorter); the figure is all sessions' frames over the wall of the slowest. Opening a session
  is timed apart (``open_s``), since a reader keeps its sessions;
* ``*_sparse``: one frame every ``--every`` frames (1 fps of a 30 fps clip) of the first
  ``--frames``: NVDEC by index, and ``chord_core.media.video.read_frames_timed`` (the reader a
  grounding job uses, at 448×252 as in the hour benchmark).

* ``chord_<reader>_{dense,sparse,keyframes}`` (``--reader nvdec|cpu-pool|default|all``):
  Chord's own reader chain forced onto one reader (``chord_core.media.readers``), at 448×252:
  every frame of the first ``--frames``, one in ``--every``, and only the keyframes (what
  chapters read once samples snap to keyframes), with GPU busy from Chord's own sampler
  (``chord_core.gpus.sampler``) over each row, and the reader's stage times summed over
  the timed reads (``stages``: NVDEC's ``setup_s``, ``nvdec_calls_s`` inside the decoder,
  ``frame_checks_s`` the per-frame pts checks and DLPack imports, ``resize_launch_s``,
  ``decode_wall_s``, ``to_host_s``). ``--on-gpu`` adds ``_gpu`` rows whose frames stay on
  the GPU, as when the model runs there.

    python3 benchmarks/decode_readers.py --clip real_hour.mp4 --frames 9000 --reader all \
        --readers chord

A reader the host lacks is reported as ``not available: <why>``, never replaced. One frame of
each NVDEC run is checked (shape H×W×3, not all zero) so a run that decodes nothing fails.
Writes JSON to ``--out`` (default ``$OUT/decode_readers.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def opencv_full(clip: str, frames: int) -> dict[str, Any]:
    """Every frame in order through one OpenCV capture, BGR → RGB as Chord's reader does."""
    import cv2

    cap = cv2.VideoCapture(clip)
    t0, n = time.perf_counter(), 0
    while n < frames:
        ok, bgr = cap.read()
        if not ok:
            break
        cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        n += 1
    cap.release()
    return _rate(n, time.perf_counter() - t0)


def pyav_full(clip: str, frames: int) -> dict[str, Any]:
    """Every frame in order through PyAV with FFmpeg's frame and slice threads, to RGB."""
    import av

    t0, n = time.perf_counter(), 0
    with av.open(clip) as box:
        stream = box.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in box.decode(stream):
            frame.to_ndarray(format="rgb24")
            n += 1
            if n >= frames:
                break
    return _rate(n, time.perf_counter() - t0)


def _rate(n: int, seconds: float) -> dict[str, Any]:
    return {"frames": n, "seconds": round(seconds, 3), "frames_per_s": round(n / seconds, 1)}


def _nvdec_session(clip: str) -> Any:
    import PyNvVideoCodec as nvc

    return nvc.SimpleDecoder(clip, gpu_id=0, use_device_memory=True,
                             output_color_type=nvc.OutputColorType.RGB)


def _check_frame(frame: Any) -> list[int]:
    """Shape of one decoded frame; raises if it is not H×W×3 or is all zero."""
    import torch

    pic = torch.from_dlpack(frame)
    if pic.dim() != 3 or 3 not in (pic.shape[0], pic.shape[-1]) or not bool(pic.any()):
        raise RuntimeError(f"NVDEC frame looks wrong: shape {tuple(pic.shape)}")
    return list(pic.shape)


def _decode_n(dec: Any, frames: int, batch: int = 64) -> tuple[int, list[int]]:
    """Decode ``frames`` frames in order, from the start again when the file ends."""
    n, shape = 0, []
    while n < frames:
        got = dec.get_batch_frames(min(batch, frames - n))
        if not got:
            if n == 0:
                raise RuntimeError("NVDEC decoded no frame")
            dec.seek_to_index(0)
            continue
        if not shape:
            shape = _check_frame(got[0])
        n += len(got)
    return n, shape


def nvdec_full(clip: str, frames: int, sessions: int) -> dict[str, Any]:
    """``sessions`` decoders in parallel threads, each decoding ``frames`` frames."""
    import torch

    t0 = time.perf_counter()
    decs = [_nvdec_session(clip) for _ in range(sessions)]
    open_s = time.perf_counter() - t0
    counts: list[int] = [0] * sessions
    shapes: list[list[int]] = [[] for _ in range(sessions)]
    errors: list[str] = []

    def work(i: int) -> None:
        try:
            counts[i], shapes[i] = _decode_n(decs[i], frames)
        except Exception as exc:  # noqa: BLE001 — reported in the result, not hidden
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(sessions)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    out = _rate(sum(counts), time.perf_counter() - t0)
    out.update(sessions=sessions, open_s=round(open_s, 3), frame_shape=shapes[0])
    if errors:
        out["errors"] = errors[:3]
    return out


def nvdec_sparse(clip: str, frames: int, every: int) -> dict[str, Any]:
    """One frame every ``every`` frames, by index, through one session."""
    dec = _nvdec_session(clip)
    indices = list(range(0, min(frames, len(dec)), every))
    t0, n = time.perf_counter(), 0
    for k in range(0, len(indices), 64):
        got = dec.get_batch_frames_by_index(indices[k:k + 64])
        if k == 0:
            _check_frame(got[0])
        n += len(got)
    return _rate(n, time.perf_counter() - t0)


def chord_sparse(clip: str, frames: int, every: int) -> dict[str, Any]:
    """Chord's reader (PyAV when installed, else OpenCV) on the same sparse frames."""
    from chord_core.media.video import read_frames_timed

    indices = list(range(0, frames, every))
    t0 = time.perf_counter()
    got, _, _ = read_frames_timed(clip, indices, (448, 252))
    out = _rate(len(got), time.perf_counter() - t0)
    try:
        import av  # noqa: F401

        out["route"] = "pyav"
    except ImportError:
        out["route"] = "opencv"
    return out


def _sampler() -> Any:
    try:
        from chord_core.gpus.sampler import GpuSampler

        sampler = GpuSampler(interval_s=0.1, history_s=600)
        if sampler.available:
            sampler.start()
            return sampler
    except Exception:  # noqa: BLE001 — no GPU figures, the rest still runs
        pass
    return None


def _busy(sampler: Any, t0: float, t1: float) -> dict[str, Any]:
    if sampler is None:
        return {}
    out = {}
    for gpu, samples in sampler.history().items():
        vals = [s.utilization_pct for s in samples if t0 <= s.t <= t1
                and s.utilization_pct is not None]
        if vals:
            out[f"gpu{gpu}_busy_mean_pct"] = round(sum(vals) / len(vals), 1)
    return out


def chord_reader(clip: str, frames: int, every: int, reader: str, kind: str,
                 sampler: Any = None, on_gpu: bool = False, size: int = 512,
                 in_flight: int = 1) -> dict[str, Any]:
    """Chord's reader chain forced onto ``reader`` alone: dense, sparse or keyframes, in
    reads of ``size`` frames (a read's GOPs are split over the sessions: 512 dense frames
    are 9 GOPs of a 2-s GOP at 30 fps, so 8 sessions get 2, 1, … GOPs and wait for the one
    with 2). The first read is untimed (an NVDEC row's sessions open there, a
    fresh reader each row); the rest are timed, with the reader's own stage times summed
    (``FrameRead.stats``). ``on_gpu``: NVDEC's frames stay on the GPU (the product's path
    when the model is there) instead of coming back to the host. ``in_flight``: NVDEC reads
    submitted ahead (``NvdecReader.submit``), so the next read's GOPs queue behind this
    one's on the sessions, as the read-ahead and several jobs' reads do.

    The sessions' busy share: ``decoder_busy_share`` is the seconds inside the decoder's
    calls summed over the sessions (``nvdec_calls_s``) over sessions × the row's wall time
    (near 1: the decoder is the limit); ``session_busy_share`` is the same with each
    session thread's whole time on its GOPs (the pool's ``busy_s``: checks, DLPack and the
    resize launch included)."""
    from chord_core.media.packet_index import packet_index
    from chord_core.media.probe import probe
    from chord_core.media.readers import ReadRequest, read_frames_auto, reader_chain

    info = probe(clip)
    n = min(frames, info.frame_count)
    if kind == "keyframes":
        idx = packet_index(clip)
        indices = [k for k in (idx.keyframes if idx else ()) if k < n]
    else:
        indices = list(range(0, n, every if kind == "sparse" else 1))
    if reader == "nvdec":
        from chord_core.media.nvdec import NvdecReader

        chain: list[Any] = [NvdecReader()]
    else:
        chain = reader_chain(reader)[:1]
    device = "cuda" if on_gpu and reader == "nvdec" else None
    slices = [tuple(indices[s:s + size]) for s in range(0, len(indices), size)]
    first = read_frames_auto(ReadRequest(info, slices[0], (448, 252), model_device=device),
                             chain)
    busy0 = float(first.stats.get("pool_busy_s", 0.0))
    t0, w0 = time.perf_counter(), time.time()
    got_n, seen, stages = 0, set(), {}
    pending: deque[Any] = deque()

    def take(got: Any) -> None:
        nonlocal got_n
        got_n += len(got.indices)
        seen.add(got.reader)
        for k, v in got.stats.items():
            if k.startswith("pool_") or k in ("sessions", "procs"):
                stages[k] = v
            elif isinstance(v, float):
                stages[k] = stages.get(k, 0.0) + v

    for part in slices[1:] or slices:
        req = ReadRequest(info, part, (448, 252), model_device=device)
        if in_flight > 1 and reader == "nvdec":
            pending.append(chain[0].submit(req))
            if len(pending) >= in_flight:
                take(pending.popleft().result())
        else:
            take(read_frames_auto(req, chain))
    while pending:
        take(pending.popleft().result())
    if device:
        import torch

        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    out = _rate(got_n, wall)
    if reader == "nvdec":
        from chord_core.media.reader_settings import nvdec_decoders

        n = nvdec_decoders()
        out.update(in_flight=in_flight, decoder_busy_share=round(
            stages.get("nvdec_calls_s", 0.0) / (n * wall), 4), session_busy_share=round(
            (float(stages.get("pool_busy_s", busy0)) - busy0) / (n * wall), 4))
    stages = {k: round(v, 4) if isinstance(v, float) else v for k, v in stages.items()}
    out.update(reader=sorted(seen), asked=len(indices), timed=got_n, stages=stages,
               **_busy(sampler, w0, time.time()))
    return out


def attempt(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one reader; a missing library or a failure becomes its row, not a crash."""
    try:
        return fn(*args)
    except ImportError as exc:
        return {"not available": str(exc)}
    except Exception as exc:  # noqa: BLE001 — the row says what broke
        return {"failed": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clip", required=True)
    ap.add_argument("--frames", type=int, default=9000, help="frames decoded per reader")
    ap.add_argument("--decoders", default="1,2,4", help="NVDEC session counts")
    ap.add_argument("--every", type=int, default=30, help="sparse: one frame in this many")
    ap.add_argument("--readers", default="opencv,pyav,nvdec,sparse",
                    help="rows: opencv,pyav,nvdec,sparse,chord")
    ap.add_argument("--reader", default="all", help="chord rows: nvdec|cpu-pool|default|all")
    ap.add_argument("--kinds", default="dense,sparse,keyframes", help="chord rows' reads")
    ap.add_argument("--nvdec-decoders", default="4,8", help="chord nvdec rows: sessions per GPU")
    ap.add_argument("--slice", type=int, default=512, help="chord rows: frames a read")
    ap.add_argument("--in-flight", default="1",
                    help="chord nvdec rows: reads submitted ahead, e.g. 1,3 (_qN rows for N>1)")
    ap.add_argument("--on-gpu", action="store_true",
                    help="chord nvdec rows also with the frames kept on the GPU (_gpu rows)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                  "decode_readers.json"))
    args = ap.parse_args()
    readers = set(args.readers.split(","))
    res: dict[str, Any] = {"clip": args.clip, "bytes": Path(args.clip).stat().st_size,
                           "frames_asked": args.frames, "cpu_count": os.cpu_count()}
    if "opencv" in readers:
        res["opencv"] = attempt(opencv_full, args.clip, args.frames)
    if "pyav" in readers:
        res["pyav"] = attempt(pyav_full, args.clip, args.frames)
    if "nvdec" in readers:
        for n in (int(v) for v in args.decoders.split(",")):
            res[f"nvdec_x{n}"] = attempt(nvdec_full, args.clip, args.frames, n)
            Path(args.out).write_text(json.dumps(res, indent=2))
    if "sparse" in readers:
        res["nvdec_sparse"] = attempt(nvdec_sparse, args.clip, args.frames, args.every)
        res["chord_sparse"] = attempt(chord_sparse, args.clip, args.frames, args.every)
    if "chord" in readers:
        sampler = _sampler()
        names = ["nvdec", "cpu-pool", "default"] if args.reader == "all" else [args.reader]
        for name in names:
            counts = args.nvdec_decoders.split(",") if name == "nvdec" else [""]
            for n in counts:
                if n:
                    os.environ["CHORD_NVDEC_DECODERS"] = n
                flights = [int(q) for q in args.in_flight.split(",")] if name == "nvdec" \
                    else [1]
                for kind, q in ((k, q) for k in args.kinds.split(",") for q in flights):
                    row = f"chord_{name}_{kind}" + (f"_x{n}" if n else "")
                    row += f"_slice{args.slice}" if args.slice != 512 else ""
                    row += f"_q{q}" if q > 1 else ""
                    res[row] = attempt(chord_reader, args.clip, args.frames, args.every, name,
                                       kind, sampler, False, args.slice, q)
                    if args.on_gpu and name == "nvdec":
                        res[row + "_gpu"] = attempt(chord_reader, args.clip, args.frames,
                                                    args.every, name, kind, sampler, True,
                                                    args.slice, q)
                    Path(args.out).write_text(json.dumps(res, indent=2))
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
