"""The project's own modules that the source scans read (the store's door, the library's
schema): every module of ``chord_core``, ``chord_ui`` and ``views``, and ``app.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Collection

ROOT = Path(__file__).resolve().parents[2]


def app_sources(*, leave_out: Collection[str] = (), below: Path | None = None
                ) -> list[Path]:
    """The modules, sorted; ``leave_out``: paths relative to the root; ``below``: leave out
    every module under that folder too."""
    files = [*(ROOT / "chord_core").rglob("*.py"), *(ROOT / "chord_ui").rglob("*.py"),
             *(ROOT / "views").rglob("*.py"), ROOT / "app.py"]
    return sorted(p for p in files if str(p.relative_to(ROOT)) not in leave_out
                  and (below is None or below not in p.parents))
