"""A first clip to try, made on this machine (nothing is downloaded): the example clip of
``chord_core.testing.example_clip``, saved like an upload (content-hashed, private), so it
behaves as any uploaded clip.
"""

from __future__ import annotations

import io
from pathlib import Path

from chord_core.testing.example_clip import NAME, TARGET, example_bytes
from chord_ui.uploads import ClipSource, save_upload

__all__ = ["NAME", "TARGET", "example_bytes", "example_clip"]


def example_clip(data_dir: Path | None = None) -> tuple[ClipSource, str]:
    """Make (once) and return the example clip, with a target to look for in it."""
    return save_upload(NAME, io.BytesIO(example_bytes()), data_dir), TARGET
