"""``benchmarks/decode_readers.py``'s NVDEC rows report the sessions' busy share from the
reader's stage times (issue 34: is the decoder the limit?), one read at a time and with reads
submitted ahead. On CPU: fake NVDEC sessions (``fake_decoder.py``) behind the real reader,
a fake stream's packet index and probe; the figures are checked for their sense, not speed."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from chord_core.media import nvdec
from chord_core.media import packet_index as pi
from chord_core.media import probe as probe_mod
from chord_core.types import VideoInfo
from fake_decoder import FakeNvSession, FakeStream

ROOT = Path(__file__).resolve().parents[2]


def bench():
    spec = importlib.util.spec_from_file_location("decode_readers",
                                                  ROOT / "benchmarks" / "decode_readers.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def fake_nvdec(monkeypatch, tmp_path):
    s = FakeStream(frames=1200, gop=60, size_wh=(64, 48))
    path = tmp_path / "fake.mp4"
    path.write_bytes(b"x")
    index = s.index()
    info = VideoInfo(path=str(path), duration_s=s.frames / 30, fps=30.0, frame_count=s.frames,
                     width=64, height=48, codec="h264", container="mp4",
                     timeline=((0, 0.0, 1 / 30),))
    made: list[FakeNvSession] = []

    class Slow(FakeNvSession):  # a decode call takes a while, as NVDEC's do
        def get_batch_frames_by_index(self, indices):
            time.sleep(0.002)
            return super().get_batch_frames_by_index(indices)

    class FakeReader(nvdec.NvdecReader):
        def __init__(self) -> None:
            def factory(name, gpu):
                made.append(Slow(s, name, gpu))
                return made[-1]
            super().__init__(factory=factory, device="cpu")

    monkeypatch.setattr(nvdec, "NvdecReader", FakeReader)
    monkeypatch.setattr(pi, "packet_index", lambda p: index)
    monkeypatch.setattr(probe_mod, "probe", lambda p: info)
    monkeypatch.setenv("CHORD_NVDEC_DECODERS", "4")
    return str(path), made


@pytest.mark.parametrize("in_flight", [1, 3])
def test_nvdec_rows_report_the_sessions_busy_share(fake_nvdec, in_flight):
    clip, made = fake_nvdec
    row = bench().chord_reader(clip, 1200, 30, "nvdec", "dense", None, False, 256, in_flight)
    assert row["reader"] == ["nvdec"] and row["timed"] == 1200 - 256  # the first is untimed
    assert row["in_flight"] == in_flight and len(made) == 4
    assert 0 < row["decoder_busy_share"] <= row["session_busy_share"] <= 1.0
    assert row["stages"]["nvdec_calls_s"] > 0 and row["stages"]["pool_opened"] == 4
