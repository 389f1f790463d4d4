"""Fixtures shared by the unit tests."""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import pytest


class CountingCapture:
    """Wraps a cv2.VideoCapture and counts decoded frames (grab calls)."""

    def __init__(self, cap: Any, counter: list[int]) -> None:
        self._cap, self._counter = cap, counter

    def grab(self) -> bool:
        self._counter[0] += 1
        return self._cap.grab()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cap, name)


@pytest.fixture
def count_grabs(monkeypatch: pytest.MonkeyPatch) -> Callable[[ModuleType], list[int]]:
    """``count_grabs(module)`` wraps the captures that ``module._open`` returns; the list's
    one element counts their grab() calls."""

    def install(module: ModuleType) -> list[int]:
        counter = [0]
        real_open = module._open
        monkeypatch.setattr(module, "_open", lambda p: CountingCapture(real_open(p), counter))
        return counter

    return install
