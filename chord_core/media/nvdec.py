"""The NVDEC reader: NVIDIA's hardware decoder through PyNvVideoCodec (optional dependency).

``SimpleDecoder`` sessions (``output_color_type=RGB``, device memory) are opened per file and
GPU and kept for the file's later reads (:mod:`chord_core.media.nvdec_sessions`: lent to one
read at a time, each going forward through the file); a read's GOPs
(:mod:`chord_core.media.gop`) are split over ``CHORD_NVDEC_DECODERS`` sessions (default 4:
an H200 has several NVDEC engines, one session keeps one busy), each fed by its own thread
with ``get_batch_frames_by_index`` (the decode calls release the GIL). Frames arrive as
DLPack tensors on the GPU; they are resized (area averaging) and turned upright there, so
only model-sized frames exist after the decoder — and when the request's ``model_device`` is
this GPU they stay a torch CUDA tensor (T×H×W×3 uint8) that the model's preprocessing takes
as it is (no host round trip). Each result's ``stats`` say where the read's time went.

Every frame's pts (``getPTS()``, the stream's time base) is checked against the packet
index: after one constant per file (NVDEC's frame 0 minus the index's: PyNvVideoCodec does not
apply an MP4 edit list as PyAV does), frame k must carry frame k's pts, so a frame NVDEC numbers
differently is caught, not misplaced; its time is that pts minus frame 0's.
A stream NVDEC does not decode (MPEG-4 Part 2, 10-bit, 4:2:2/4:4:4, odd sizes) is refused
up front (:class:`~chord_core.media.readers.ReaderUnavailable`), and the next reader reads it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Sequence

from chord_core.media.reader_types import (
    FrameRead,
    ReaderFailed,
    ReaderUnavailable,
    ReadRequest,
    inside,
    usable_index,
)

log = logging.getLogger(__name__)

NVDEC_CODECS = frozenset({"h264", "hevc", "vp9", "av1", "vp8", "mpeg2video"})
NVDEC_PIX_FMTS = frozenset({"yuv420p", "yuvj420p", "nv12"})
MIN_SIDE, MAX_SIDE = 48, 4096
SESSION_FILES = 2  # files whose sessions are kept per reader
BATCH = 64  # frames asked of one session per call at most (PyNvVideoCodec's own limit)
# A call's frames stay locked in the decoder until the session's next call (also while the
# session waits in the pool between reads): at most this many bytes of them a session, so
# 720p asks 48 frames a call, 1080p 21, 4K 5.
CALL_BYTES = 128 << 20


def frames_per_call(size_wh: tuple[int, int]) -> int:
    """Frames asked of a session per call for frames of ``size_wh`` (RGB, 3 bytes a pixel)."""
    w, h = size_wh
    return max(4, min(BATCH, CALL_BYTES // max(1, w * h * 3)))

SessionFactory = Callable[[str, int], Any]


def nvdec_refusal(codec: str, pix_fmt: str, size_wh: tuple[int, int]) -> str | None:
    """Why NVDEC cannot decode this stream, or None when it can."""
    w, h = size_wh
    if codec not in NVDEC_CODECS:
        return f"NVDEC does not decode {codec or 'this codec'}"
    if pix_fmt and pix_fmt not in NVDEC_PIX_FMTS:
        return f"NVDEC reads 8-bit 4:2:0 here, not {pix_fmt}"
    if w % 2 or h % 2 or min(w, h) < MIN_SIDE or max(w, h) > MAX_SIDE:
        return f"NVDEC cannot decode a {w}×{h} frame (even sides {MIN_SIDE}–{MAX_SIDE})"
    return None


def _real_factory() -> SessionFactory:
    try:
        import PyNvVideoCodec as nvc
    except ImportError as exc:
        raise ReaderUnavailable(f"PyNvVideoCodec is not installed ({exc})") from exc
    import torch

    if not torch.cuda.is_available():
        raise ReaderUnavailable("no CUDA GPU here")

    def make(name: str, gpu: int) -> Any:
        return nvc.SimpleDecoder(name, gpu_id=gpu, use_device_memory=True,
                                 output_color_type=nvc.OutputColorType.RGB)

    return make


class NvdecReader:
    """See module docstring. ``factory`` and ``device`` replace the real sessions (tests:
    a fake decoder whose frames are host arrays behind DLPack). Sessions live in a
    :class:`~chord_core.media.nvdec_sessions.SessionPool` for the reader's lifetime (the
    product's reads share one reader a process: :func:`shared_reader`)."""

    name = "nvdec"

    def __init__(self, decoders: int | None = None, *, factory: SessionFactory | None = None,
                 device: str | None = None) -> None:
        from chord_core.media.nvdec_sessions import SessionPool

        self.decoders, self.factory, self.device = decoders, factory, device
        self.pool = SessionPool(SESSION_FILES)
        self._shifts: dict[tuple, int] = {}

    def read(self, req: ReadRequest) -> FrameRead:
        from chord_core.config import nvdec_decoders
        from chord_core.media.gop import plan_gops, split_reads

        t0 = time.perf_counter()
        factory = self.factory or _real_factory()
        index = usable_index(req.info)
        why = nvdec_refusal(index.codec, index.pix_fmt, index.size_wh)
        if why:
            raise ReaderUnavailable(why)
        count = self.decoders or nvdec_decoders()
        parts = split_reads(plan_gops(inside(req.indices, index), index.keyframes), count)
        wanted = [[k for r in part for k in r.wanted] for part in parts]
        key, held = self._borrow(req.info.path, factory, [w[0] for w in wanted], count)
        stats: dict[str, float] = {"setup_s": time.perf_counter() - t0}
        ok = False
        try:
            shift = self._shift(req.info.path, held[-1], index)
            got = self._decode_parts(held, wanted, index, req, shift, stats)
            out = self._assemble(req, index, got, len(parts), stats)
            ok = True
            return out
        finally:
            self.pool.give_back(key, held, ok)

    def _borrow(self, path: str, factory: SessionFactory, firsts: list[int], count: int
                ) -> tuple[tuple, list[Any]]:
        from chord_core.media.confined import source

        st = os.stat(path)
        key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, str(self._device()))
        gpu = self._device().index or 0

        def make() -> Any:
            try:
                with source(path) as name:
                    return factory(name, gpu)
            except Exception as exc:  # noqa: BLE001 — the stream is not NVDEC's
                raise ReaderUnavailable(f"NVDEC cannot open it ({exc})") from exc

        return key, self.pool.borrow(key, firsts, make, cap=count)

    def _decode_parts(self, held: list[Any], wanted: list[list[int]], index: Any,
                      req: ReadRequest, shift: int, stats: dict[str, float]) -> list[Any]:
        """Each part on its own session, one thread each (the decode calls release the
        GIL); the time each stage took, summed over the sessions, into ``stats``."""
        got: list[Any] = [None] * len(wanted)
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(i: int) -> None:
            mine: dict[str, float] = {}
            try:
                got[i] = self._decode(held[i].session, wanted[i], index, req, shift, mine)
                held[i].last = got[i][0][-1] if got[i][0] else held[i].last
            except BaseException as exc:  # noqa: BLE001 — re-raised below, in the caller
                errors.append(exc)
            with lock:
                for k, v in mine.items():
                    stats[k] = stats.get(k, 0.0) + v

        t = time.perf_counter()
        threads = [threading.Thread(target=work, args=(i,), name=f"chord-nvdec-{i}")
                   for i in range(len(wanted))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        stats["decode_wall_s"] = time.perf_counter() - t
        if errors:
            if isinstance(errors[0], (ReaderFailed, ReaderUnavailable)):
                raise errors[0]
            raise ReaderFailed(f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]
        return got

    def _shift(self, path: str, held: Any, index: Any) -> int:
        """NVDEC's pts of frame 0 minus the packet index's (once per file). PyNvVideoCodec's
        demuxer does not apply an MP4 edit list the way PyAV's does (measured on an H200:
        frame 0 at −1024 in 1/15360 against PyAV's 0), so pts are compared after this one
        constant; every frame must then carry exactly its index entry's pts. Asked of the
        session of the read's last part (the one least likely to start at frame 0: a
        session asked for frame 0 twice reopens the file)."""
        key = (os.path.realpath(path), index.pts[0], len(index.pts))
        if key not in self._shifts:
            first = held.session.get_batch_frames_by_index([0])
            if not first:
                raise ReaderFailed("NVDEC decoded no frame 0")
            self._shifts[key] = int(first[0].getPTS()) - index.pts[0]
            held.last = 0
        return self._shifts[key]

    def _keeps(self, req: ReadRequest) -> bool:
        """The frames stay a tensor: the model runs on the device they were decoded on."""
        import torch

        if req.model_device is None:
            return False
        want = torch.device(req.model_device)
        if want.type == "cuda" and want.index is None:
            want = torch.device("cuda", torch.cuda.current_device())
        return want == self._device()

    def _device(self) -> Any:
        import torch

        if self.device is not None:
            return torch.device(self.device)
        return torch.device("cuda", torch.cuda.current_device())

    def _decode(self, session: Any, wanted: Sequence[int], index: Any, req: ReadRequest,
                shift: int = 0, stats: dict[str, float] | None = None
                ) -> tuple[list[int], list[int], Any]:
        """(indices, pts, frames on the device at the request's size) of one session;
        ``shift``: NVDEC's pts minus the packet index's (see :meth:`_shift`). ``stats``:
        seconds in the decoder's calls, in the per-frame checks and DLPack imports (Python,
        under the GIL) and in launching the resize (asynchronous on the GPU)."""
        import torch

        ks: list[int] = []
        pts: list[int] = []
        done: list[Any] = []  # model-sized batches (copies: the decoder reuses its surfaces)
        spent = {"nvdec_calls_s": 0.0, "frame_checks_s": 0.0, "resize_launch_s": 0.0}
        step = frames_per_call(index.size_wh)
        for s in range(0, len(wanted), step):
            if req.cancel is not None and req.cancel.is_set():
                from chord_core.errors import JobCancelled

                raise JobCancelled("reading video frames was cancelled",
                                   hint="start the job again")
            asked = list(wanted[s:s + step])
            t0 = time.perf_counter()
            frames = session.get_batch_frames_by_index(asked)
            t1 = time.perf_counter()
            pics = []
            for k, frame in zip(asked, frames):
                p = int(frame.getPTS()) - shift
                if p != index.pts[k]:
                    raise ReaderFailed(f"NVDEC's frame {k} has pts {p + shift} (shifted by "
                                       f"{shift}: {p}), the packet index says {index.pts[k]}")
                ks.append(k)
                pts.append(p)
                pics.append(torch.from_dlpack(frame))
            t2 = time.perf_counter()
            if pics:
                done.append(_resize(torch.stack(pics).to(self._device()), req.size_wh,
                                    req.info.rotation))
            spent["nvdec_calls_s"] += t1 - t0
            spent["frame_checks_s"] += t2 - t1
            spent["resize_launch_s"] += time.perf_counter() - t2
            if len(frames) < len(asked):  # the decoder ran out: the file ends there
                break
        if stats is not None:
            stats.update(spent)
        return ks, pts, torch.cat(done) if done else None

    def _assemble(self, req: ReadRequest, index: Any, got: list[Any], parts: int,
                  stats: dict[str, float] | None = None) -> FrameRead:
        import torch

        t = time.perf_counter()
        ks = [k for g in got for k in g[0]]
        pts = [p for g in got for p in g[1]]
        stacks = [g[2] for g in got if g[2] is not None]
        n = 0
        while n < len(req.indices) and n < len(ks) and ks[n] == req.indices[n]:
            n += 1
        if n == 0:
            raise ReaderFailed("NVDEC decoded no wanted frame")
        frames = torch.cat(stacks)[:n]
        times = tuple(round(float((p - index.pts[0]) * index.time_base), 6) for p in pts[:n])
        kept = self._keeps(req)
        if not kept:
            frames = frames.cpu().numpy()  # waits for the resize: the GPU's time is in here
        if req.on_progress is not None:
            req.on_progress(n, len(req.indices))
        stopped = req.indices[n] if n < len(req.indices) else None
        out: dict[str, Any] = {k: round(v, 4) for k, v in (stats or {}).items()}
        out.update(sessions=parts, on_device=kept, **{
            ("to_host_s" if not kept else "assemble_s"): round(time.perf_counter() - t, 4)})
        out.update({f"pool_{k}": v for k, v in self.pool.stats.items()})
        return FrameRead(frames, tuple(req.indices[:n]), times, self.name, stopped_at=stopped,
                         stats=out)


_SHARED: dict[str, NvdecReader] = {}
_SHARED_LOCK = threading.Lock()


def shared_reader() -> NvdecReader:
    """The process's NVDEC reader: its sessions serve every later read of the same file
    (``reader_chain`` used to make a reader, and open its sessions, for every read)."""
    with _SHARED_LOCK:
        if "" not in _SHARED:
            _SHARED[""] = NvdecReader()
        return _SHARED[""]


def _resize(x: Any, size_wh: tuple[int, int] | None, rotation: int) -> Any:
    """T×H×W×3 uint8 (stored orientation) → T×h×w×3 uint8 at the displayed ``size_wh``,
    upright (area averaging, on the tensor's device)."""
    import torch
    import torch.nn.functional as F

    if x.dim() == 4 and x.shape[1] == 3 and x.shape[-1] != 3:  # planar RGB: to HWC
        x = x.permute(0, 2, 3, 1)
    if size_wh is not None:
        w, h = (size_wh[1], size_wh[0]) if rotation in (90, 270) else size_wh
        if (x.shape[1], x.shape[2]) != (h, w):
            src = x.permute(0, 3, 1, 2)
            src = src.half() if src.is_cuda else src.float()  # half: the GPU's fast path
            y = F.interpolate(src, size=(int(h), int(w)), mode="area")
            x = y.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
    turns = {90: -1, 180: 2, 270: 1}.get(rotation, 0)
    if turns:
        x = torch.rot90(x, k=turns, dims=(1, 2))
    return x.contiguous()
