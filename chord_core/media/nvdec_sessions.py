"""NVDEC decoder sessions kept per file, each fed by its own thread from its own queue of GOPs:
a read is cut into GOPs that are placed on the sessions by decoded-frame cost
(:mod:`chord_core.media.nvdec_plan`), and reads submitted while others decode queue behind
them on the sessions that will be free first, so the sessions stay busy across reads.

Facts of PyNvVideoCodec's ``SimpleDecoder`` (2.x) behind it (issue 34's profile):

* opening a session opens the file and makes a decoder (8 sessions of an hour's MP4 took
  0.13 s on an H200), so sessions are kept for the file's later reads, ``cap`` a file
  (``CHORD_NVDEC_DECODERS``), shared by every read of the file at once;
* ``get_batch_frames_by_index`` whose smallest index is at or before the session's previous
  one reopens the file (``ResetDecoderIfRequired``), so the planner keeps each session going
  forward and counts a backward placement (``stats["backward"]``) only when it is cheaper;
* a 512-frame read of a 2-s-GOP clip is 9–10 GOPs: split into 8 consecutive runs it kept
  4.3 of 8 sessions busy; placed by cost, the GOPs of the next read fill the gaps.

A session is used by its own thread only. A thread that finds no work for ``linger_s``
seconds ends (its session stays open for the next read, which starts a new thread). A GOP
that fails drops its session (its state is unknown: the next GOP on that lane opens a new
one) and fails its read, whose other GOPs are skipped; other reads go on. Sessions of the
least recently read files beyond ``files`` are closed once they have no work.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from chord_core.media.gop import GopRead
from chord_core.media.nvdec_plan import Lane, assign

__all__ = ["Held", "SessionPool", "Ticket"]

LINGER_S = 5.0  # an idle session thread waits this long for work, then ends

# work(held, reads) -> (result, stats): decode ``reads`` (one lane's consecutive GOPs of
# one read) on ``held.session``, keeping ``held.last`` at the last frame returned
Work = Callable[["Held", Sequence[GopRead]], tuple[Any, dict[str, float]]]


@dataclass
class Held:
    """A session and the last frame index it returned (−1: none yet)."""

    session: Any
    last: int = -1


class Ticket:
    """One read's GOPs in flight: their results by position, the first error, stage times
    summed over the sessions, and which lanes worked for it."""

    def __init__(self, jobs: int, cancel: threading.Event | None, work: Work) -> None:
        self.work = work  # decodes this read's GOPs (its size, rotation, checks)
        self.results: list[Any] = [None] * jobs
        self.left = jobs
        self.error: BaseException | None = None
        self.cancel = cancel
        self.stats: dict[str, float] = {}
        self.lanes: set[int] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()
        if not jobs:
            self.done.set()

    @property
    def dead(self) -> bool:
        """Its remaining GOPs need not be decoded (it failed or was cancelled)."""
        return self.error is not None or (self.cancel is not None and self.cancel.is_set())

    def put(self, positions: Sequence[int], result: Any, stats: dict[str, float],
            lane: int) -> None:
        with self._lock:
            self.results[positions[0]] = result  # a merged batch: at its first GOP
            self.lanes.add(lane)
            for k, v in stats.items():
                self.stats[k] = self.stats.get(k, 0.0) + v
            self._count(len(positions))

    def fail(self, exc: BaseException, count: int) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
            self._count(count)

    def skip(self, count: int) -> None:
        with self._lock:
            self._count(count)

    def _count(self, n: int) -> None:
        self.left -= n
        if self.left <= 0:
            self.done.set()

    def wait(self) -> list[Any]:
        """The results in GOP order, once every GOP is done; raises the first error, or
        JobCancelled when the read's cancel is set (its queued GOPs are then skipped)."""
        while not self.done.wait(0.05):
            if self.cancel is not None and self.cancel.is_set():
                break
        if self.cancel is not None and self.cancel.is_set():
            from chord_core.errors import JobCancelled

            raise JobCancelled("reading video frames was cancelled", hint="start the job again")
        if self.error is not None:
            raise self.error
        return self.results


@dataclass
class _Job:
    ticket: Ticket
    pos: int
    read: GopRead
    cost: float  # what placing it added to its lane's queued cost


@dataclass
class _Slot:
    lane: Lane
    index: int
    held: Held | None = None
    queue: deque[_Job] = field(default_factory=deque)
    thread: threading.Thread | None = None
    running: bool = False
    closed: bool = False


@dataclass
class _File:
    make: Callable[[], Any]
    slots: list[_Slot] = field(default_factory=list)


class SessionPool:
    """See module docstring."""

    def __init__(self, files: int = 2, linger_s: float = LINGER_S) -> None:
        self.files, self.linger_s = files, linger_s
        self._files: OrderedDict[tuple, _File] = OrderedDict()
        self._cv = threading.Condition()
        self.stats: dict[str, float] = {"opened": 0, "reused": 0, "backward": 0, "gops": 0,
                                        "busy_s": 0.0}

    def submit(self, key: tuple, reads: Sequence[GopRead], make: Callable[[], Any],
               work: Work, cap: int, cancel: threading.Event | None = None) -> Ticket:
        """Queue ``reads`` (one read's GOPs, in clip order) on the file's sessions; ``make``
        opens a session (in its thread), ``work`` decodes GOPs on one (see :data:`Work`)."""
        ticket = Ticket(len(reads), cancel, work)
        with self._cv:
            f = self._files.get(key)
            if f is None:
                f = self._files[key] = _File(make)
            f.make = make
            self._files.move_to_end(key)
            self._evict()
            lanes = [s.lane for s in f.slots]
            picks: list[int] = []
            for pos, r in enumerate(reads):  # one at a time: assign is greedy, in order
                n = len(lanes)
                before = [(lane.queued, lane.last) for lane in lanes]
                i = assign([r], lanes, cap)[0]
                if i >= n:
                    f.slots.append(_Slot(lanes[i], i))
                    before.append((0.0, -1))
                self.stats["backward"] += int(before[i][1] >= r.wanted[0])
                f.slots[i].queue.append(_Job(ticket, pos, r, lanes[i].queued - before[i][0]))
                picks.append(i)
            self.stats["gops"] += len(reads)
            used = set(picks)
            self.stats["reused"] += sum(1 for i in used if f.slots[i].held is not None)
            for i in used:
                self._start(f, f.slots[i])
            self._cv.notify_all()
        return ticket

    def sessions(self, key: tuple) -> int:
        """Sessions open for ``key``."""
        with self._cv:
            f = self._files.get(key)
            return sum(1 for s in f.slots if s.held is not None) if f else 0

    def lanes(self, key: tuple) -> int:
        """Lanes (sessions open or to be opened) of ``key``."""
        with self._cv:
            f = self._files.get(key)
            return len(f.slots) if f else 0

    def close(self, wait_s: float = 0.0) -> None:
        """Close every file's sessions once their queued work is done (threads end). With
        ``wait_s``, wait up to that long for the sessions' threads to end, so every session
        is let go here, not by whoever drops the last reference (at exit: the interpreter,
        after its daemon threads stopped mid-call)."""
        with self._cv:
            threads = [s.thread for f in self._files.values() for s in f.slots if s.thread]
            for f in self._files.values():
                for s in f.slots:
                    s.closed = True
                    if s.thread is None:
                        s.held = None  # idle: its session is let go now, in this thread
            self._files.clear()
            self._cv.notify_all()
        deadline = time.monotonic() + wait_s
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _start(self, f: _File, slot: _Slot) -> None:
        if slot.thread is None:
            slot.thread = threading.Thread(target=self._loop, args=(f, slot), daemon=True,
                                           name=f"chord-nvdec-{slot.index}")
            slot.thread.start()

    def _evict(self) -> None:
        for key in list(self._files)[:-1]:
            if len(self._files) <= self.files:
                return
            f = self._files[key]
            if any(s.queue or s.running for s in f.slots):
                continue  # work in flight: closed later
            for s in f.slots:
                s.closed = True
            del self._files[key]

    def _take(self, slot: _Slot) -> list[_Job] | None:
        """The next batch of the slot's queue: consecutive GOPs of one live read (dead
        reads' GOPs are skipped); None when the thread should end. Under the lock."""
        deadline = time.monotonic() + self.linger_s
        while True:
            while slot.queue and slot.queue[0].ticket.dead:
                job = slot.queue.popleft()
                slot.lane.queued = max(0.0, slot.lane.queued - job.cost)
                job.ticket.skip(1)
            if slot.queue:
                head = slot.queue.popleft()
                batch = [head]
                while slot.queue and slot.queue[0].ticket is head.ticket:
                    batch.append(slot.queue.popleft())
                return batch
            left = deadline - time.monotonic()
            if slot.closed or left <= 0:
                slot.thread = None
                if slot.closed:
                    slot.held = None
                return None
            self._cv.wait(left)

    def _loop(self, f: _File, slot: _Slot) -> None:
        while True:
            with self._cv:
                batch = self._take(slot)
                if batch is None:
                    return
                slot.running = True
            ticket = batch[0].ticket
            positions = [j.pos for j in batch]
            t = time.perf_counter()
            failed: BaseException | None = None
            try:
                if slot.held is None:
                    slot.held = Held(f.make())
                    with self._cv:
                        self.stats["opened"] += 1
                result, stats = ticket.work(slot.held, [j.read for j in batch])
            except BaseException as exc:  # noqa: BLE001 — the read's caller raises it
                failed = exc
                if type(exc).__name__ != "JobCancelled":
                    slot.held = None  # its state is unknown: the lane's next GOP reopens
            with self._cv:  # before the read hears of it: its next read plans on this
                slot.running = False
                self.stats["busy_s"] += time.perf_counter() - t
                slot.lane.queued = max(0.0, slot.lane.queued - sum(j.cost for j in batch))
                slot.lane.opened = slot.held is not None
                if not slot.queue:  # the plan's idea of the lane is now the session's
                    slot.lane.queued = 0.0
                    slot.lane.last = slot.held.last if slot.held is not None else -1
            if failed is not None:
                ticket.fail(failed, len(batch))
            else:
                ticket.put(positions, result, stats, slot.index)
