"""The ask box of the Library page: a question → the library searched, the best hits checked
on their frames by entailment (the app's workers, the app's model), an answer whose every
line cites clip@time with the checked score (chord_core.library.ask). Each claim: its frame,
its citation, its score, and "Play here" (the clip from the moment). The answer is kept in
the session, so the page's other buttons do not lose it.
"""

from __future__ import annotations

import logging
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import resources
from chord_ui.formatting import md_escape
from chord_ui.i18n import t
from chord_ui.library_view import _thumb
from chord_ui.uploads import browser_playable, servable

log = logging.getLogger(__name__)

K_ANSWER, K_PLAY = "ask_answer", "ask_play"


def ask_box() -> None:
    """The form, then the last answer."""
    with st.form("library-ask", border=True):
        st.markdown(t("**Ask across the library**"))
        cols = st.columns([5, 1])
        question = cols[0].text_input(t("Question"), max_chars=200, key="ask-question",
                                      placeholder=t("e.g. is a forklift in the walkway?"))
        check = cols[1].number_input(t("Moments to check"), 1, 10, 5, key="ask-check")
        asked = st.form_submit_button(t("Ask"), icon=":material/question_answer:")
    if asked:
        _ask(question, int(check))
    doc = st.session_state.get(K_ANSWER)
    if doc:
        answer(doc)


def _ask(question: str, check: int) -> None:
    from chord_core.library.ask import ask

    try:
        with st.spinner(t("Searching and checking the best moments on their frames…")):
            st.session_state[K_ANSWER] = ask(
                resources.library_index(), question, resources.job_manager(),
                resources.cluster().startup_model, check=check)
        st.session_state[K_PLAY] = None
    except ChordError as exc:
        st.error(f"{md_escape(exc.message)}  \n{md_escape(exc.hint)}", icon=":material/error:")


def answer(doc: dict[str, Any]) -> None:
    """The answer's summary line and one card per checked claim, supported ones first."""
    supported, checked = doc["supported"], len(doc["claims"])
    if not doc["candidates"]:
        st.info(t("Nothing analysed so far mentions this. Analyse or watch the footage first."))
        return
    if supported:
        st.success(t("{n} of {m} checked moment(s) show it.", n=supported, m=checked))
    else:
        st.warning(t("None of the {m} checked moment(s) shows it.", m=checked))
    st.caption(t("Searched in {s} ms, checked in {c} ms (threshold P ≥ {p})",
                 s=f"{doc['timings_ms']['search']:.0f}", c=f"{doc['timings_ms']['check']:.0f}",
                 p=f"{doc['threshold']:.2f}"))
    claims = sorted(doc["claims"], key=lambda c: (not c["supported"],
                                                  -float(c["p_entailment"] or 0.0)))
    for n, claim in enumerate(claims):
        _claim(claim, n)


def _claim(claim: dict[str, Any], n: int) -> None:
    path = claim["path"]
    shown = servable(path)
    with st.container(border=True, key=f"ask-claim-{n}"):
        left, right = st.columns([1, 4])
        with left:
            if shown:
                _thumb(path, claim["at_s"])
        with right:
            p = claim["p_entailment"]
            mark = "✓" if claim["supported"] else "✗"
            st.markdown(f"{mark} **{md_escape(claim['citation'])}** · P = "
                        f"{'—' if p is None else f'{p:.2f}'}")
            st.markdown(md_escape(claim["text"][:300]))
            if claim["error"]:
                st.caption(md_escape(claim["error"]))
            if shown and browser_playable(path):
                st.button(t("Play here"), key=f"ask-play-{n}", icon=":material/play_arrow:",
                          on_click=st.session_state.__setitem__, args=(K_PLAY, n))
        if shown and st.session_state.get(K_PLAY) == n:
            st.video(path, start_time=int(claim["at_s"]))
