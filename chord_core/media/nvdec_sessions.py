"""NVDEC decoder sessions kept between reads, lent to one read at a time, each to the part of
a read it can reach going forward.

Two facts of PyNvVideoCodec's ``SimpleDecoder`` (2.x) shape this pool:

* opening a session opens the file (the MP4 index of an hour: ≈ 110,000 samples) and makes a
  decoder: 4 sessions took 0.40 s, 8 took 0.13 s on the H200 (``decode_readers.py``
  ``open_s``), so a reader that opens its sessions per read (what every product read did
  before: ``reader_chain`` made a new reader each time) pays that per job, not per file;
* ``get_batch_frames_by_index`` whose smallest index is at or before the session's previous
  one *reconfigures* the decoder (``ResetDecoderIfRequired``: the file is opened again), so a
  part goes to an idle session whose last frame lies before the part's first; only when none
  is idle and the file already has ``cap`` sessions does a session go backwards (once per
  stage of a long run: the reduces after the map, a search's chapters in rank order).

An idle session still holds its last call's frames (the decoder unlocks them at the next
call: ``nvdec.CALL_BYTES`` bounds them), so at most ``cap`` sessions a file are kept idle.

A session is lent to one read only (the read-ahead thread, a task's own read and the describe
batch's reader threads read at once), returned with the last frame it decoded, and dropped
when its read failed (its state is unknown). Idle sessions of the least recently read files
beyond ``files`` are closed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["Held", "SessionPool"]


@dataclass
class Held:
    """A session and the last frame index it returned (−1: none yet)."""

    session: Any
    last: int = -1
    fresh: bool = False  # opened for this read


class SessionPool:
    """See module docstring."""

    def __init__(self, files: int = 2) -> None:
        self.files = files
        self._idle: OrderedDict[tuple, list[Held]] = OrderedDict()
        self._count: dict[tuple, int] = {}
        self._cap: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self.stats = {"opened": 0, "reused": 0, "backward": 0}

    def borrow(self, key: tuple, firsts: Sequence[int], make: Callable[[], Any],
               cap: int) -> list[Held]:
        """One session per part, ``firsts`` being each part's first frame (increasing):
        an idle session behind it, else a new one (``make``, outside the lock), else, at
        ``cap`` sessions for the file, the idle one furthest back (it reconfigures)."""
        chosen: list[Held | None] = []
        with self._lock:
            self._cap[key] = cap
            idle = self._idle.setdefault(key, [])
            self._idle.move_to_end(key)
            self._evict()
            count = self._count.get(key, 0)
            for first in firsts:
                ahead = [h for h in idle if h.last < first]
                pick: Held | None = None
                if ahead:
                    pick = max(ahead, key=lambda h: h.last)
                elif count >= cap and idle:
                    pick = min(idle, key=lambda h: h.last)
                    self.stats["backward"] += 1
                if pick is None:
                    count += 1
                else:
                    idle.remove(pick)
                    self.stats["reused"] += 1
                chosen.append(pick)
            self._count[key] = count
        try:
            out = [h if h is not None else Held(make(), fresh=True) for h in chosen]
        except BaseException:
            made = sum(1 for h in chosen if h is None)
            with self._lock:
                self._count[key] = max(0, self._count.get(key, 0) - made)
                self._idle.setdefault(key, []).extend(h for h in chosen if h is not None)
            raise
        with self._lock:
            self.stats["opened"] += sum(1 for h in out if h.fresh)
        return out

    def give_back(self, key: tuple, held: Sequence[Held], ok: bool) -> None:
        """Sessions back after a read; a failed read's, and any past the file's cap of idle
        sessions, are dropped (closed by GC)."""
        with self._lock:
            kept: list[Held] = []
            if ok and key in self._idle:
                idle = self._idle[key]
                room = max(0, self._cap.get(key, len(held)) - len(idle))
                kept = list(held)[:room]  # beyond the cap (reads at once): closed
                for h in kept:
                    h.fresh = False
                idle.extend(kept)
            self._count[key] = max(0, self._count.get(key, 0) - (len(held) - len(kept)))

    def sessions(self, key: tuple) -> int:
        """Sessions open for ``key`` (lent or idle)."""
        with self._lock:
            return self._count.get(key, 0)

    def _evict(self) -> None:
        while len(self._idle) > self.files:
            old, idle = self._idle.popitem(last=False)
            self._count[old] = max(0, self._count.get(old, 0) - len(idle))
            if not self._count[old]:
                del self._count[old]
