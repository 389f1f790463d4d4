"""``from chord_inference import ChordVideoAnalyzer`` — the import path of the original Chord
documents. The code lives in :mod:`chord_core.compat` (over ``chord_core.Engine``)."""

from __future__ import annotations

from chord_core.compat import ChordVideoAnalyzer

__all__ = ["ChordVideoAnalyzer"]
