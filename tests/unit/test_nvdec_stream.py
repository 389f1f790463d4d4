"""NVDEC sessions on a CUDA stream of their own (``nvdec.open_session``), so a read does not
wait behind the model's work on the default stream; PyNvVideoCodec is faked at its
boundary (``SimpleDecoder``'s constructor), as this machine has no GPU."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from chord_core.media import nvdec


class FakeNvc:
    OutputColorType = SimpleNamespace(RGB="rgb")

    def __init__(self, refuse_stream: bool = False, refuse_all: bool = False) -> None:
        self.calls: list[dict] = []
        self.refuse_stream, self.refuse_all = refuse_stream, refuse_all

    def SimpleDecoder(self, name, **kw):  # noqa: N802 — the library's name
        self.calls.append(kw)
        if self.refuse_all or (self.refuse_stream and "cuda_stream" in kw):
            raise RuntimeError("cudastream input argument does not correspond to cudacontext")
        return SimpleNamespace(name=name, get_batch_frames_by_index=lambda idx: list(idx))


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(nvdec, "_stream_refused", [])


def _stream(gpu):
    return SimpleNamespace(cuda_stream=4242 + gpu), 777


def test_a_session_gets_its_own_stream_and_the_primary_context():
    fake = FakeNvc()
    s = nvdec.open_session(fake, "a.mp4", 1, _stream)
    assert isinstance(s, nvdec.OwnStream) and s.stream.cuda_stream == 4243
    (kw,) = fake.calls
    assert (kw["gpu_id"], kw["cuda_context"], kw["cuda_stream"]) == (1, 777, 4243)
    assert kw["use_device_memory"] and kw["output_color_type"] == "rgb"
    assert s.get_batch_frames_by_index([3, 4]) == [3, 4] and s.name == "a.mp4"


def test_a_refused_stream_opens_on_the_default_one_with_one_warning(caplog):
    fake = FakeNvc(refuse_stream=True)
    with caplog.at_level(logging.WARNING, logger="chord_core.media.nvdec"):
        first = nvdec.open_session(fake, "a.mp4", 0, _stream)
        second = nvdec.open_session(fake, "b.mp4", 0, _stream)
    assert not isinstance(first, nvdec.OwnStream) and second.name == "b.mp4"
    assert "cuda_stream" not in fake.calls[1] and "cuda_context" not in fake.calls[1]
    assert caplog.text.count("default CUDA stream") == 1 and "cudacontext" in caplog.text

    def broken(gpu):  # no stream to be had at all: the same fallback
        raise RuntimeError("no stream")
    assert nvdec.open_session(FakeNvc(), "c.mp4", 0, broken).name == "c.mp4"


def test_a_file_nvdec_cannot_open_raises_its_own_error_and_warns_of_no_stream(caplog):
    with caplog.at_level(logging.WARNING, logger="chord_core.media.nvdec"), \
            pytest.raises(RuntimeError, match="cudacontext"):
        nvdec.open_session(FakeNvc(refuse_all=True), "bad.mp4", 0, _stream)
    assert "default CUDA stream" not in caplog.text and not nvdec._stream_refused


def test_chord_nvdec_stream_0_keeps_the_default_stream(caplog):
    from chord_core.config import nvdec_own_stream

    assert nvdec_own_stream({}) and not nvdec_own_stream({"CHORD_NVDEC_STREAM": "0"})
    fake = FakeNvc()
    s = nvdec.open_session(fake, "a.mp4", 0, None)
    assert not isinstance(s, nvdec.OwnStream) and "cuda_stream" not in fake.calls[0]
    assert "default CUDA stream" not in caplog.text
