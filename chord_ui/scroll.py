"""Bring a part of the page into view once: results that just appeared below the fold.

A tiny ``st.components.v2`` component (inline JavaScript, no HTML from data): when it mounts
with an id this tab has not scrolled to yet, it scrolls its own place in the page to the top
of the view. Ids are remembered per tab, so reruns don't pull the page back while the user
reads further down.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import streamlit as st

_JS = """
export default function (component) {
  const { data, parentElement } = component;
  if (!data || !data.id) return undefined;
  const seen = (window.__chordScrolled = window.__chordScrolled || new Set());
  if (seen.has(data.id)) return undefined;
  seen.add(data.id);
  const target = parentElement.host || parentElement;
  target.style.scrollMarginTop = "72px";  // below Streamlit's top bar
  const go = () => target.scrollIntoView({ block: "start", behavior: "instant" });
  for (const ms of [50, 400, 1200]) setTimeout(go, ms);  // late elements shift the layout
  return undefined;
}
"""


@cache
def _component() -> Any:
    return st.components.v2.component("chord_scroll_here", js=_JS, isolate_styles=False)


def scroll_here(view_id: str) -> None:
    """Scroll this spot to the top of the view the first time ``view_id`` is shown."""
    _component()(data={"id": view_id}, key=f"scroll-{view_id}")
