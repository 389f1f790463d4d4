"""A fake decoder at the reader boundary, for tests only: the keyframe-to-keyframe CPU path
(:class:`FakeGopDecoder`, a :class:`~chord_core.media.gop_reader.GopDecoder`) and NVDEC
sessions (:class:`FakeNvSession`, what ``PyNvVideoCodec.SimpleDecoder`` offers a reader).

A fake stream is a list of frames in presentation order with pts ``pts0 + k·step`` and a
keyframe every ``gop`` frames. Every frame is a tiny image whose pixels all hold its own
index (mod 256), so a test sees which frame it got. Knobs make the failures the readers must
survive: ``ends_at`` (a truncated file: no frame from that index on), ``land_late`` (a seek
that starts one GOP too late), ``pts_shift`` (NVDEC numbering frames differently).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterator

import numpy as np

from chord_core.media.packet_index import PacketIndex, index_from_packets


@dataclass
class FakeStream:
    frames: int
    gop: int = 30
    pts0: int = -1024  # an edit-list shift, as NVDEC reported on real H.264 (1/15360)
    step: int = 512
    time_base: Fraction = Fraction(1, 15360)
    size_wh: tuple[int, int] = (64, 48)
    ends_at: int | None = None
    land_late: bool = False
    pts_shift: int = 0  # NVDEC's pts minus the container's (an edit list it does not apply)
    renumber_from: int | None = None  # NVDEC numbers frames from here one too far
    decoded: list[int] = field(default_factory=list)  # indices the fake decoded, in order

    def pts(self, k: int) -> int:
        return self.pts0 + k * self.step

    def index(self, codec: str = "h264", pix_fmt: str = "yuv420p") -> PacketIndex:
        """The packet index a demux of this stream gives (decode order: each keyframe, then
        its GOP's frames with the second one first, as B-frames arrive)."""
        packets: list[tuple[int | None, bool]] = []
        for g in range(0, self.frames, self.gop):
            ks = list(range(g, min(g + self.gop, self.frames)))
            order = ks[:1] + ks[2:3] + ks[1:2] + ks[3:]
            packets += [(self.pts(k), k == g) for k in order]
        return index_from_packets(packets, self.time_base, codec=codec, pix_fmt=pix_fmt,
                                  size_wh=self.size_wh)

    def picture(self, k: int) -> np.ndarray:
        w, h = self.size_wh
        return np.full((h, w, 3), k % 256, dtype=np.uint8)


class FakeGopDecoder:
    """Decodes a :class:`FakeStream` from a keyframe on (see module docstring)."""

    def __init__(self, stream: FakeStream) -> None:
        self.s = stream

    def frames_from(self, key_pts: int, keyframes_only: bool,
                    wanted_pts: frozenset[int] = frozenset()
                    ) -> Iterator[tuple[int | None, Any]]:
        s = self.s
        k = (key_pts - s.pts0) // s.step
        k += s.gop if s.land_late else 0
        end = s.frames if s.ends_at is None else min(s.frames, s.ends_at)
        while k < end:
            if not keyframes_only or k % s.gop == 0:
                s.decoded.append(k)
                yield s.pts(k), k
            k += 1

    def convert(self, frame: Any, size_wh: tuple[int, int] | None, rotation: int) -> np.ndarray:
        w, h = size_wh or self.s.size_wh
        return np.full((h, w, 3), int(frame) % 256, dtype=np.uint8)

    def close(self) -> None:
        pass


class FakeNvFrame:
    """A decoded frame as PyNvVideoCodec hands it over: DLPack and ``getPTS()``."""

    def __init__(self, pixels: np.ndarray, pts: int) -> None:
        self.pixels, self.pts = pixels, pts

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.pixels.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.pixels.__dlpack_device__()

    def getPTS(self) -> int:  # noqa: N802 — PyNvVideoCodec's name
        return self.pts


class FakeNvSession:
    """``SimpleDecoder``'s ``get_batch_frames_by_index`` over a :class:`FakeStream`, with a
    model of what a session decodes: from the keyframe at or before a wanted frame unless it
    can decode on from its last frame (a seek otherwise), and the whole file again when asked
    for a frame at or before its last one (PyNvVideoCodec reopens the file then). ``cost``
    counts the frames it decoded (GOP heads included); ``frames_decoded`` lists them."""

    def __init__(self, stream: FakeStream, name: str = "", gpu: int = 0) -> None:
        self.s, self.name, self.gpu = stream, name, gpu
        self.asked: list[list[int]] = []
        self.pos = -1  # last frame decoded
        self.cost = self.seeks = self.reopens = 0
        self.frames_decoded: list[int] = []

    def _decode_to(self, k: int) -> None:
        if k <= self.pos:
            self.reopens += 1
            self.pos = -1
        key = k - k % self.s.gop
        if key > self.pos + 1:
            self.seeks += self.pos >= 0
            start = key
        else:
            start = self.pos + 1
        self.frames_decoded += range(start, k + 1)
        self.cost += k - start + 1
        self.pos = k

    def get_batch_frames_by_index(self, indices: list[int]) -> list[FakeNvFrame]:
        self.asked.append(list(indices))
        end = self.s.frames if self.s.ends_at is None else self.s.ends_at
        out = []
        for k in indices:
            if k >= end:
                break
            self._decode_to(k)
            self.s.decoded.append(k)
            j = k + 1 if self.s.renumber_from is not None and k >= self.s.renumber_from else k
            out.append(FakeNvFrame(self.s.picture(j), self.s.pts(j) + self.s.pts_shift))
        return out


def fake_clip(stream: FakeStream, monkeypatch: Any, tmp_path: Any, fps: float = 30.0) -> Any:
    """The ``VideoInfo`` of a one-byte file whose packet index is ``stream``'s (the reader's
    ``packet_index`` patched to answer it), for readers over fake sessions."""
    from chord_core.media import packet_index as pi
    from chord_core.types import VideoInfo

    path = tmp_path / "fake.mp4"
    path.write_bytes(b"x")
    index = stream.index()
    monkeypatch.setattr(pi, "packet_index", lambda p: index)
    w, h = stream.size_wh
    return VideoInfo(path=str(path), duration_s=stream.frames / fps, fps=fps,
                     frame_count=stream.frames, width=w, height=h, codec="h264",
                     container="mp4", timeline=((0, 0.0, 1 / fps),))
