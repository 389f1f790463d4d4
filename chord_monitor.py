"""``from chord_monitor import GPUMonitor`` — the import path of the original Chord documents.
The code lives in :mod:`chord_core.compat` (over the shared GPU sampler)."""

from __future__ import annotations

from chord_core.compat import GPUMonitor

__all__ = ["GPUMonitor"]
