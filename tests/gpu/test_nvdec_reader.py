"""The real NVDEC reader (PyNvVideoCodec on a GPU): the same frames and times as the CPU
readers, frames kept as a CUDA tensor on request, and the automatic choice picking it.
Skipped, with the reason, where PyNvVideoCodec does not import or no GPU is present."""

from __future__ import annotations

import numpy as np
import pytest

from chord_core.testing.videos import has_pyav, make_video


def _why_skip() -> str | None:
    try:
        import PyNvVideoCodec  # noqa: F401
    except ImportError as exc:
        return f"PyNvVideoCodec does not import ({exc})"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if not has_pyav():
        return "PyAV is needed to write the clip and read its packet index"
    return None


pytestmark = pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from chord_core.media.probe import probe

    path = tmp_path_factory.mktemp("nvdec") / "c.mp4"
    make_video(path, duration_s=12, fps=30, size_wh=(640, 360))
    return probe(path)


def test_nvdec_reads_the_cpu_readers_frames_and_times(clip):
    from chord_core.media.nvdec import NvdecReader
    from chord_core.media.readers import DefaultReader, ReadRequest

    want = tuple(range(3, clip.frame_count, 17))
    req = ReadRequest(clip, want, (448, 252))
    got = NvdecReader(decoders=3).read(req)
    ref = DefaultReader().read(req)
    assert got.reader == "nvdec" and got.indices == ref.indices == want
    assert got.times_s == pytest.approx(ref.times_s, abs=1e-3)
    assert got.frames.shape == ref.frames.shape
    diff = np.abs(got.frames.astype(np.int16) - ref.frames.astype(np.int16))
    assert diff.mean() < 6.0  # colour conversion and scaling differ slightly, not pictures


def test_nvdec_frames_stay_on_the_gpu_when_asked(clip):
    import torch

    from chord_core.media.nvdec import NvdecReader
    from chord_core.media.readers import ReadRequest

    got = NvdecReader(decoders=2).read(ReadRequest(clip, (0, 30, 60), (224, 126),
                                                   model_device="cuda"))
    assert isinstance(got.frames, torch.Tensor) and got.frames.is_cuda
    assert tuple(got.frames.shape) == (3, 126, 224, 3) and got.frames.dtype == torch.uint8


def test_sessions_decode_on_their_own_stream_beside_busy_default_stream_work(clip):
    """Each session has a CUDA stream of its own (not the legacy default stream the model's
    work is on), and its frames are right while the default stream is kept busy."""
    import torch

    from chord_core.media import nvdec
    from chord_core.media.readers import DefaultReader, ReadRequest

    reader = nvdec.NvdecReader(decoders=2)
    want = tuple(range(0, clip.frame_count, 9))
    req = ReadRequest(clip, want, (448, 252), model_device="cuda")
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):  # the model's stand-in: queued work on the default stream
        a = a @ a.T / 4096
    got = reader.read(req)
    assert not nvdec._stream_refused
    sessions = [slot.held.session for f in reader.pool._files.values() for slot in f.slots
                if slot.held is not None]
    assert sessions and all(isinstance(s, nvdec.OwnStream) for s in sessions)
    ref = DefaultReader().read(ReadRequest(clip, want, (448, 252)))
    diff = np.abs(got.frames.cpu().numpy().astype(np.int16) - ref.frames.astype(np.int16))
    assert diff.mean() < 6.0


def test_the_automatic_choice_is_nvdec_here(clip):
    from chord_core.media.readers import ReadRequest, read_frames_auto

    got = read_frames_auto(ReadRequest(clip, (1, 2, 3), (224, 126)))
    assert got.reader == "nvdec" and got.note == "read by nvdec"


@pytest.mark.parametrize("task, query", [("describe", ""), ("ground", "the square")])
def test_frames_reach_the_model_on_the_gpu_without_a_host_copy(tiny_model_dir, clip,
                                                                monkeypatch, task, query):
    """The engine on cuda: NVDEC's frames go to the processor as a CUDA tensor (no frame
    tensor is ever turned into numpy), and the result is the host path's."""
    import torch

    from chord_core.analysis import engine as engine_mod
    from chord_core.analysis.engine import Engine
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import ModelConfig, SamplingConfig

    seen: list[tuple] = []
    real = torch.Tensor.numpy

    def spy(self, *args, **kwargs):
        if self.dtype == torch.uint8 and self.dim() in (3, 4) and self.shape[-1] == 3:
            seen.append(tuple(self.shape))
        return real(self, *args, **kwargs)

    engine = Engine(ModelConfig(model="test", device="cuda", compile=False))
    req = AnalysisRequest(clip.path, task, query, SamplingConfig(fps=1.0),
                          max_new_tokens=8, min_new_tokens=8)
    monkeypatch.setattr(engine_mod, "frames_device", lambda lm: None)
    host = engine.analyze(req, info=clip)
    monkeypatch.undo()
    monkeypatch.setattr(torch.Tensor, "numpy", spy)
    kept = engine.analyze(req, info=clip)
    assert kept.sampling.reader == host.sampling.reader == "nvdec"
    assert seen == [] and kept.sampling == host.sampling
    assert len(kept.raw_outputs) == len(host.raw_outputs)
