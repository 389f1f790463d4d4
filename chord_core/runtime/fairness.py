"""Which queued task a worker takes next: fair between groups, in order within one.

A group is a parent job (a live stream's run, a long-video run, a batch) or, for a job of
its own, the job itself. Taking the head of the queue (first in, first out) let one group
that queued much at once hold a worker: a batch of 200 clips, or a stream whose chunks
arrived while the GPU was busy, kept every other stream and every clip asked for after it
waiting for the whole backlog. The worker now takes the first queued task of the group
it served least recently (a group it never served first of all), so N groups with work
queued take turns, one task each, and a task's place inside its own group is kept.

Jobs of their own keep their order among themselves: each is a group never served, so the
first queued goes first, as before. Batch mates (``scheduling.batch_mates``) still ride
along with the task taken: several groups' describes share one model call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Protocol

# groups remembered at most; past it the ones served longest ago are forgotten (a group
# forgotten counts as never served, which only moves it ahead once)
MAX_GROUPS = 4096


class _Grouped(Protocol):
    @property
    def group(self) -> str: ...


class FairShare:
    """Turns between groups: ``take`` picks the next task of a worker's queue."""

    def __init__(self) -> None:
        self._turn = 0
        self._last: dict[str, int] = {}  # group → the turn it was last served (insertion order)

    def take(self, queue: deque[str], tasks: Mapping[str, _Grouped]) -> str | None:
        """Remove and return the task of ``queue`` to run next (None: the queue is empty):
        the first queued task of the group served least recently; never served first."""
        best_i, best_turn = -1, 0
        for i, tid in enumerate(queue):
            state = tasks.get(tid)
            turn = self._last.get(state.group, -1) if state is not None else -1
            if best_i < 0 or turn < best_turn:
                best_i, best_turn = i, turn
                if turn < 0:  # a group never served: nothing goes before it
                    break
        if best_i < 0:
            return None
        tid = queue[best_i]
        del queue[best_i]
        state = tasks.get(tid)
        if state is not None:
            self.served(state.group)
        return tid

    def served(self, group: str) -> None:
        """Count one turn for ``group`` (a task of it was handed to a worker)."""
        self._turn += 1
        self._last.pop(group, None)  # re-inserted last: the dict stays ordered by turn
        self._last[group] = self._turn
        if len(self._last) > MAX_GROUPS:
            del self._last[next(iter(self._last))]
