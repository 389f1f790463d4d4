"""What every frame reader shares (:mod:`chord_core.media.readers` chooses among them): the
request, the result, the two ways of declining, and the packet-index check that keyframe-aware
readers need."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from chord_core.types import VideoInfo

__all__ = ["FrameRead", "ReadRequest", "ReaderFailed", "ReaderUnavailable", "host_frames",
           "inside", "usable_index"]

MAX_TIME_OFF_S = 0.0015  # packet times and the probe's timeline agree within this


class ReaderUnavailable(Exception):
    """This reader cannot read this file here (missing package, no GPU, unsupported stream)."""


class ReaderFailed(Exception):
    """This reader started but cannot vouch for its frames: the next reader reads them."""


@dataclass(frozen=True)
class ReadRequest:
    """Frames ``indices`` (strictly increasing) of the probed clip at ``size_wh`` (w, h)."""

    info: VideoInfo
    indices: tuple[int, ...]
    size_wh: tuple[int, int] | None
    cancel: threading.Event | None = None
    on_progress: Callable[[int, int], None] | None = None
    # the model's device ("cuda:0"): a reader decoding there hands back a torch tensor on
    # it (NVDEC), so the frames reach the model's preprocessing without a host round trip
    model_device: str | None = None


@dataclass
class FrameRead:
    """A read's frames (T×H×W×3 uint8 RGB, upright; a torch CUDA tensor when the request
    kept them on the GPU), the indices read, their times, which reader ran and why."""

    frames: Any
    indices: tuple[int, ...]
    times_s: tuple[float, ...]
    reader: str
    note: str = ""
    stopped_at: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    def warnings(self) -> list[str]:
        """What a result must say about this read (a truncated file)."""
        if self.stopped_at is None:
            return []
        return [f"decoding stopped at frame {self.stopped_at} (the file is damaged or "
                f"truncated there); the result uses the {len(self.indices)} frames before it"]


def host_frames(frames: Any) -> Any:
    """``frames`` as a host numpy array (one copy from the device for a read kept there;
    numpy arrays and lists pass unchanged): for the consumers that crop or resize on the
    CPU (two-pass, box scores, entailment, exports)."""
    if type(frames).__module__.startswith("torch"):
        return frames.cpu().numpy()
    return frames


def usable_index(info: VideoInfo) -> Any:
    """The packet index of ``info``'s file when keyframe-to-keyframe reading can use it:
    it proves indices and its times are the probe's (else ReaderUnavailable)."""
    from chord_core.media.packet_index import packet_index

    if info.container == "image":
        raise ReaderUnavailable("an image")
    index = packet_index(info.path)
    if index is None:
        raise ReaderUnavailable("PyAV is not installed or cannot open the file")
    if not index.usable:
        raise ReaderUnavailable(f"frame indices are not provable from packets ({index.why})")
    n = min(index.frame_count, info.frame_count)
    probe = np.array([info.time_of(k) for k in range(0, n, max(1, n // 512))])
    ours = np.array([index.time_s(k) for k in range(0, n, max(1, n // 512))])
    if n < 1 or np.max(np.abs(probe - ours)) > MAX_TIME_OFF_S:
        raise ReaderUnavailable("packet times differ from the probe's timeline")
    return index


def inside(indices: Sequence[int], index: Any) -> tuple[int, ...]:
    """The wanted frames the file has packets for (a truncated file has fewer than its
    probe planned on); ReaderFailed when none is."""
    got = tuple(k for k in indices if k < index.frame_count)
    if not got:
        raise ReaderFailed(f"the file holds {index.frame_count} frames, none of those wanted")
    return got
