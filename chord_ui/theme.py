"""One light/dark theme for every page, kept across reloads (issue 39).

Streamlit's Settings menu stores the chosen theme in the browser's localStorage under a key
made of the path the tab was loaded at (``stActiveTheme-<path>-v2``, Streamlit 1.67), so a
choice made on ``/`` is not the one a reload of ``/history`` reads. A tiny
``st.components.v2`` component (``static/theme.js``, no HTML, no data from users), mounted
by ``app.py`` on every page, keeps one shared value and writes it under every page's key:
the next load of any page reads the same choice.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import streamlit as st

STATIC = Path(__file__).resolve().parent / "static"
THEME_KEY_VERSION = 2  # Streamlit's CACHED_THEME_VERSION (frontend utils: stActiveTheme-…-v2)


def page_paths(url_paths: list[str], base: str | None = None) -> list[str]:
    """Each page's path as the browser loads it: ``/<baseUrlPath>/<page>`` (``/`` for the
    default page), with and without a trailing slash."""
    if base is None:
        base = str(st.get_option("server.baseUrlPath") or "")
    root = "/" + base.strip("/")
    out: list[str] = []
    for url in url_paths:
        path = (root.rstrip("/") + "/" + url.strip("/")) if url else root
        out += [path, path.rstrip("/") + "/"] if path != "/" else ["/"]
    return list(dict.fromkeys(out))


@cache
def _component() -> Any:
    return st.components.v2.component(
        "chord_theme", js=(STATIC / "theme.js").read_text(encoding="utf-8"))


def keep_theme(url_paths: list[str]) -> None:
    """Mount the syncing script (invisible) for the app's pages."""
    _component()(data={"paths": page_paths(url_paths), "version": THEME_KEY_VERSION},
                 key="chord-theme")
