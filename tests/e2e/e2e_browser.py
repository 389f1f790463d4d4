"""The headless Chromium the browser tests drive: Debian's package, never `playwright install`.

A module of its own (not ``conftest``): every test folder has a conftest.py, and which one
``import conftest`` finds depends on what ran before."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
