""""Add to case" outside the Review page: a Library search hit, or a moment of a result.

A case (chord_core.library.cases) gathers moments under a name; the Review page adds review
items and exports the case. Here: the Library page has one case-name box above its hits and
an "Add to case" button on each card (the hit as the search returned it: its clip comes from
the index, never from the browser); a finished result in Analyze has an "Add to case"
popover: the case name, which moment (each segment, or the whole clip) and Add. The name
typed last is remembered for the session, so hits and moments from several pages go into
the same case.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import resources
from chord_ui.i18n import t

K_LAST = "case_name_last"  # the case name typed last on any page (plain state, not a widget)
MAX_CHOICES = 50  # segments offered in the moment list


def _default_name() -> str:
    from datetime import date

    return str(st.session_state.get(K_LAST) or f"case {date.today()}")


def name_input(key: str, where: Any = st) -> str:
    """The case-name box (its value remembered for the other pages); returns the name."""
    name = str(where.text_input(t("Case"), value=_default_name(), key=key, max_chars=80,
                                help=t("A name for the moments you collect")) or "").strip()
    st.session_state[K_LAST] = name
    return name


def _said(added: bool, name: str) -> None:
    st.toast(t("Added to case {name}.", name=name) if added else
             t("Already in case {name}.", name=name), icon=":material/playlist_add:")


def _failed(exc: ChordError) -> None:
    st.toast(f"{exc.message} — {exc.hint}", icon=":material/error:")


def _name(name_key: str) -> str:
    """The case name in the box ``name_key`` as this click sent it (callbacks run before
    the script, so the remembered name may be a run old)."""
    name = str(st.session_state.get(name_key) or st.session_state.get(K_LAST) or "").strip()
    st.session_state[K_LAST] = name
    return name


def add_hit(hit: dict[str, Any], name_key: str) -> None:
    """Button callback: the search hit into the case in ``name_key``'s box."""
    from chord_core.library.cases import add_hit as add

    name = _name(name_key)
    try:
        _said(add(resources.library_index(), name, hit), name)
    except ChordError as exc:
        _failed(exc)


def hit_button(where: Any, hit: dict[str, Any], i: int, name_key: str) -> None:
    """The card's "Add to case" button (the case: the box ``name_key``)."""
    where.button(t("Add to case"), key=f"library-case-{i}", icon=":material/playlist_add:",
                 on_click=add_hit, args=(hit, name_key))


def moments_of(result: Any) -> list[tuple[float, float, str]]:
    """What a result offers to a case: each segment (start, end, label), then the whole clip."""
    spans = [(float(s.start_s), float(s.end_s), s.label or result.query)
             for s in result.segments[:MAX_CHOICES]]
    return spans + [(0.0, float(result.video.duration_s), "")]


def _moment_text(moment: tuple[float, float, str]) -> str:
    from chord_core.library.ask import clock

    start, end, label = moment
    if not label:
        return t("The whole clip ({start}–{end})", start=clock(start), end=clock(end))
    return f"{start:.1f}–{end:.1f} s · {label[:60]}"  # whole seconds would round 0.5 away


def _add_span(job_id: str, name_key: str, key: str,
              choices: list[tuple[float, float, str]]) -> None:
    from chord_core.library.cases import add_job_span

    name = _name(name_key)
    start, end, label = choices[int(st.session_state.get(key) or 0)]
    try:
        _said(add_job_span(resources.library_index(), name, job_id, start, end, label), name)
    except ChordError as exc:
        _failed(exc)


def result_control(result: Any, job_id: str) -> None:
    """The result's "Add to case" popover: the case, the moment, Add."""
    if not job_id:
        return
    choices = moments_of(result)
    with st.popover(t("Add to case"), icon=":material/playlist_add:"):
        name_key, key = f"case-name-{job_id}", f"case-moment-{job_id}"
        name_input(name_key)
        st.selectbox(t("Moment"), range(len(choices)), key=key,
                     format_func=lambda n: _moment_text(choices[n]))
        st.button(t("Add"), key=f"case-add-{job_id}", icon=":material/add:", type="primary",
                  on_click=_add_span, args=(job_id, name_key, key, choices))
