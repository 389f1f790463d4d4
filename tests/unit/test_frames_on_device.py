"""Frames NVDEC decodes on the model's GPU reach the model's preprocessing as a tensor, never
through the host (issue 34). On CPU: the fake NVDEC sessions (``fake_decoder.py``) at the
decoder boundary, the tiny test model, and a fake device check saying the model runs where
the reader decodes ("cpu" standing in for "cuda:0"). Every conversion of a frame tensor to
numpy is recorded; the tensor path must make none, and give what the numpy path gives."""

from __future__ import annotations

import numpy as np
import pytest

from chord_core.analysis import engine as engine_mod
from chord_core.analysis.engine import Engine
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig, SamplingConfig
from chord_core.media import packet_index as pi
from chord_core.media import readers
from chord_core.media.nvdec import NvdecReader
from chord_core.media.reader_types import ReadRequest, host_frames
from chord_core.types import VideoInfo
from fake_decoder import FakeNvSession, FakeStream

FPS = 30.0


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Engine:
    eng = Engine(ModelConfig(model="test", device="cpu", batch_size=4))
    eng.load()
    return eng


@pytest.fixture
def fake_clip(monkeypatch, tmp_path) -> VideoInfo:
    """A 4 s 224×126 clip whose only reader is NVDEC over fake sessions on "cpu"."""
    s = FakeStream(frames=120, gop=30, size_wh=(224, 126))
    path = tmp_path / "fake.mp4"
    path.write_bytes(b"x")
    index = s.index()
    monkeypatch.setattr(pi, "packet_index", lambda p: index)
    monkeypatch.setattr(readers, "reader_chain", lambda prefer=None: [NvdecReader(
        2, factory=lambda name, gpu: FakeNvSession(s, name, gpu), device="cpu")])
    return VideoInfo(path=str(path), duration_s=s.frames / FPS, fps=FPS, frame_count=s.frames,
                     width=224, height=126, codec="h264", container="mp4",
                     timeline=((0, 0.0, 1 / FPS),))


@pytest.fixture
def numpy_calls(monkeypatch) -> list[tuple]:
    """Shapes of the uint8 image-like tensors converted to numpy (frames leaving the device)."""
    import torch

    seen: list[tuple] = []
    real = torch.Tensor.numpy

    def spy(self, *args, **kwargs):
        if self.dtype == torch.uint8 and self.dim() in (3, 4) and self.shape[-1] == 3:
            seen.append(tuple(self.shape))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "numpy", spy)
    return seen


def on_model_device(monkeypatch, device: str | None) -> None:
    monkeypatch.setattr(engine_mod, "frames_device", lambda lm: device)


def test_the_reader_keeps_a_tensor_only_for_a_model_on_its_own_device(fake_clip, numpy_calls):
    import torch

    reader = readers.reader_chain()[0]
    same = reader.read(ReadRequest(fake_clip, (0, 31, 62), (112, 56), model_device="cpu"))
    assert isinstance(same.frames, torch.Tensor) and tuple(same.frames.shape) == (3, 56, 112, 3)
    assert numpy_calls == []
    for elsewhere in (None, "meta"):
        got = reader.read(ReadRequest(fake_clip, (0, 31, 62), (112, 56), model_device=elsewhere))
        assert isinstance(got.frames, np.ndarray)
        assert np.array_equal(got.frames, same.frames.numpy())
        assert got.times_s == same.times_s


@pytest.mark.parametrize("task, query", [("describe", ""), ("ground", "the square")])
def test_tensor_frames_go_to_the_model_without_a_host_copy(engine, fake_clip, numpy_calls,
                                                           monkeypatch, task, query):
    req = AnalysisRequest(fake_clip.path, task, query, SamplingConfig(fps=1.0),
                          max_new_tokens=4, min_new_tokens=4)
    on_model_device(monkeypatch, None)
    host = engine.analyze(req, info=fake_clip)
    assert host.sampling.reader == "nvdec" and numpy_calls  # the host path converts the frames
    numpy_calls.clear()
    on_model_device(monkeypatch, "cpu")
    kept = engine.analyze(req, info=fake_clip)
    assert numpy_calls == []
    assert kept.sampling == host.sampling and kept.sampling.num_frames >= 4
    assert kept.sampling.timestamps_s == pytest.approx(
        [k / FPS for k in kept.sampling.frame_indices], abs=1e-6)
    a, b = host.to_dict(), kept.to_dict()
    assert a["raw_outputs"] == b["raw_outputs"]  # the same pixels reached the model
    assert a.get("tokens") == b.get("tokens")


def test_describe_many_reads_onto_the_device_and_entailment_gets_host_arrays(
        engine, fake_clip, numpy_calls, monkeypatch):
    on_model_device(monkeypatch, "cpu")
    reqs = [AnalysisRequest(fake_clip.path, "describe", sampling=SamplingConfig(fps=1.0),
                            max_new_tokens=3, min_new_tokens=3)] * 2
    out = engine.describe_many(reqs, infos=[fake_clip] * 2, batch_size=2)
    assert [r.sampling.reader for r in out] == ["nvdec", "nvdec"] and numpy_calls == []
    frames, *_ = engine.read_frames(fake_clip, out[0].sampling)
    assert isinstance(frames, np.ndarray)  # a caller that did not ask for device frames
    assert host_frames(frames) is frames


def test_image_inputs_built_from_tensors_equal_those_from_arrays(engine, numpy_calls):
    import torch

    from chord_core.analysis.entailment import _processor_inputs, entail_messages
    from chord_core.model.image_batch import image_batch_inputs

    lm = engine.load()
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (56, 84, 3), dtype=np.uint8) for _ in range(3)]
    text = lm.processor.apply_chat_template(entail_messages("a square"), tokenize=False,
                                            add_generation_prompt=True)
    ref = image_batch_inputs(lm, arrays, [text] * 3, lambda im, tx: _processor_inputs(lm, im, tx))
    assert ref is not None  # the device path, checked against the processor
    numpy_calls.clear()
    mine = image_batch_inputs(lm, [torch.from_numpy(a) for a in arrays], [text] * 3,
                              lambda im, tx: pytest.fail("checked once per model already"))
    assert numpy_calls == [] and set(mine) == set(ref)
    for key in ref:
        assert torch.equal(mine[key], ref[key]), key
