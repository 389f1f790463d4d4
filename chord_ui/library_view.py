"""Library page body: search every clip analysed so far, and see each hit as a card.

The search box and filters are a form; the query and filters go into the URL (``?q=…``,
``&folder=``, ``&from=``, ``&to=``, ``&task=``), so a reload or a shared link shows the same
hits. A card: the thumbnail (the clip's frame at the hit's moment), the clip's name, the time
range, what kind of passage matched, the snippet with the matched words in bold (the text is
escaped first: model text and file names are never markdown), "Play here" (the clip in the
card, from the hit's start) and "Open in Analyze" (the stored result, ``?job=``). Only clips
``uploads.servable`` allows are shown or played.
"""

from __future__ import annotations

import logging
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import quote

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import resources
from chord_ui.formatting import md_escape
from chord_ui.i18n import lang, link_params, t
from chord_ui.uploads import browser_playable, servable, show_video

log = logging.getLogger(__name__)

TASK_CHOICES = ("", "describe", "ground", "entail", "chapters")
LIMIT = 30
K_PLAY = "library_play"
K_CASE_NAME = "library-case"


def _param(name: str) -> str:
    return str(st.query_params.get(name) or "")[:200]


def _day(value: str) -> date | None:
    try:
        return date.fromisoformat(value) if value else None
    except ValueError:
        return None


def search_form() -> None:
    """The search box and filters; submitting puts them in the URL and reruns."""
    with st.form("library-search", border=False):
        q = st.text_input(t("Search the library"), value=_param("q"), max_chars=200,
                          placeholder=t("Words to find, e.g. a person climbs the fence"),
                          key="library_q")
        cols = st.columns([3, 2, 2, 2])
        folder = cols[0].text_input(t("Folder"), value=_param("folder"), max_chars=500,
                                    help=t("Only clips in this folder or below it"))
        start = cols[1].date_input(t("From"), value=_day(_param("from")), format="YYYY-MM-DD")
        end = cols[2].date_input(t("To"), value=_day(_param("to")), format="YYYY-MM-DD")
        task = cols[3].selectbox(t("Task"), TASK_CHOICES,
                                 index=TASK_CHOICES.index(_param("task"))
                                 if _param("task") in TASK_CHOICES else 0,
                                 format_func=lambda v: t(v) if v else t("Any task"))
        if st.form_submit_button(t("Search"), icon=":material/search:", type="primary"):
            values = {"q": q.strip(), "folder": folder.strip(),
                      "from": start.isoformat() if start else "",
                      "to": end.isoformat() if end else "", "task": task}
            st.query_params.from_dict({k: v for k, v in values.items() if v}
                                      | _kept_params())
            st.session_state.pop(K_PLAY, None)
            st.rerun()


def _kept_params() -> dict[str, str]:
    return link_params()


def results() -> None:
    """The hits for the query in the URL, as cards."""
    from chord_core.library.search import Filters, search

    q = _param("q")
    if not q:
        return
    filters = Filters(folder=_param("folder"), date_from=_param("from"),
                      date_to=_param("to"), task=_param("task"))
    try:
        doc = search(resources.library_index(), q, filters=filters, limit=LIMIT)
    except ChordError as exc:
        st.error(f"{md_escape(exc.message)}  \n{md_escape(exc.hint)}", icon=":material/error:")
        return
    hits = doc["hits"]
    if not hits:
        st.info(t("No hits. Only analysed clips are searched: run Analyze, Batch or a watched "
                  "folder first."), icon=":material/search_off:")
        return
    words = dict(n=len(hits), q=md_escape(q))
    st.caption(t("{n} hits for {q}", **words) if doc["matched"] == "all" else
               t("{n} hits for {q} (no passage has every word: passages with any of them)",
                 **words))
    from chord_ui.case_add import name_input

    name_input(K_CASE_NAME, st.columns([2, 3])[0])  # "Add to case" on a card puts it here
    for i, hit in enumerate(hits):
        card(hit, i)


def snippet_markdown(parts: list[list[Any]]) -> str:
    """The snippet with matched words in bold; every piece escaped first (the spaces
    between pieces kept: ``md_escape`` drops a line's leading spaces)."""
    out = []
    for piece, hit in parts:
        core = piece.strip()
        lead = " " if piece[:1].isspace() else ""
        tail = " " if piece[-1:].isspace() else ""
        if core:
            out.append(lead + (f"**{md_escape(core)}**" if hit else md_escape(core)) + tail)
        else:
            out.append(" " if piece else "")
    return "".join(out)


def hit_heading(hit: dict[str, Any]) -> str:
    span = f"{hit['start_s']:.1f}–{hit['end_s']:.1f} s"
    extra = ""
    if hit.get("verdict"):
        extra = " · " + t("verdict {v}", v=t(hit["verdict"]))
    elif not hit.get("found", True):
        extra = " · " + t("not found in the clip")
    return (f"**{md_escape(hit['name'])}** · {span} · {t(hit['kind'])} · {t(hit['task'])}"
            f"{extra} · {hit['day']}")


def card(hit: dict[str, Any], i: int) -> None:
    """One hit: thumbnail, heading, snippet, play and open buttons."""
    path = hit["video_path"]
    shown = servable(path)
    with st.container(border=True, key=f"library-hit-{i}"):
        left, right = st.columns([1, 3])
        with left:
            if shown:
                _thumb(path, hit["thumbnail_s"])
        with right:
            st.markdown(hit_heading(hit))
            st.markdown(snippet_markdown(hit["parts"]))
            st.caption(md_escape(hit["folder"]))
            buttons = st.container(horizontal=True)
            if shown and browser_playable(path):
                buttons.button(t("Play here"), key=f"play-{i}", icon=":material/play_arrow:",
                                  on_click=st.session_state.__setitem__, args=(K_PLAY, i))
            from chord_ui.case_add import hit_button

            hit_button(buttons, hit, i, K_CASE_NAME)
            if hit["task"] in ("describe", "ground", "entail"):
                buttons.link_button(t("Open in Analyze"),  # at the hit's moment
                                    f"/?job={quote(hit['source'])}&t={hit['start_s']:g}"
                                    f"&lang={lang()}",
                                       icon=":material/open_in_new:")
            if not shown:
                st.caption(t("The clip is gone or outside the media roots: no thumbnail or "
                             "playback."))
        if shown and st.session_state.get(K_PLAY) == i:
            show_video(path, start_time=int(hit["start_s"]), end_time=int(hit["end_s"]) + 1
                       if hit["end_s"] > hit["start_s"] else None)


def _thumb(path: str, t_s: float) -> None:
    from chord_core.config import default_data_dir
    from chord_core.library.thumbs import thumbnail
    from chord_core.media.roots import job_roots

    try:
        st.image(thumbnail(path, t_s, default_data_dir() / "thumbs", roots=job_roots()),
                 width="stretch")
    except ChordError as exc:
        log.info("no thumbnail for %s: %s", path, exc)


def index_footer() -> None:
    """How big the index is, and a rebuild button (reads the whole store again)."""
    index = resources.library_index()
    stats = index.stats()
    cols = st.columns([4, 1])
    cols[0].caption(t("Index: {n} passages of {clips} clips", n=stats["passages"],
                      clips=stats["clips"]))
    if cols[1].button(t("Rebuild index"), key="library-rebuild", icon=":material/refresh:"):
        n = index.rebuild()
        st.toast(t("Indexed {n} passages of {clips} clips.", n=n,
                   clips=index.stats()["clips"]))


K_ALERT_SEEN = "library_alert_seen"
K_ALERT_PLAY = "library_alert_play"


def alerts_section() -> None:
    """The newest alerts of the watched folders' standing checks, each playable."""
    from chord_core.library.alerts import latest_alerts

    st.subheader(t("Alerts"))
    alerts = latest_alerts(resources.library_index(), 20)
    if not alerts:
        st.caption(t("No alerts yet. Watched folders with statements (CHORD_WATCH_CHECKS, or "
                     "`watch --statement`) raise them here."))
        return
    for alert in alerts:
        path = alert["path"]
        with st.container(border=True, key=f"library-alert-{alert['id']}"):
            st.markdown(t("**{name}** · {start}–{end} s · P = {p} · {statement}",
                          name=md_escape(Path(path).name), start=f"{alert['start_s']:.1f}",
                          end=f"{alert['end_s']:.1f}", p=f"{alert['probability']:.2f}",
                          statement=md_escape(alert["statement"])))
            st.caption(t("Evidence frames at {times} s", times=", ".join(
                f"{e['t_s']:.1f}" for e in alert["evidence"])))
            run = alert.get("hook_run")
            if run:
                first = next((ln for ln in run["output"].splitlines() if ln.strip()), "")
                st.caption(t("Hook: {outcome} in {s} s", outcome=md_escape(run["outcome"]),
                             s=f"{run['duration_s']:.1f}")
                           + (f" · `{first[:200].replace('`', chr(39))}`" if first else ""))
            if servable(path) and browser_playable(path):
                st.button(t("Play here"), key=f"alert-play-{alert['id']}",
                          icon=":material/play_arrow:",
                          on_click=st.session_state.__setitem__,
                          args=(K_ALERT_PLAY, alert["id"]))
                if st.session_state.get(K_ALERT_PLAY) == alert["id"]:
                    show_video(path, start_time=int(alert["start_s"]))


@st.fragment(run_every=5.0)
def alert_toasts() -> None:
    """A toast for each alert stored since this session began (checked every 5 s)."""
    from chord_core.library.alerts import list_alerts

    index = resources.library_index()
    if K_ALERT_SEEN not in st.session_state:
        newest = index.read("SELECT MAX(id) FROM library_alerts")  # schema.py made it
        st.session_state[K_ALERT_SEEN] = int(newest[0][0] or 0) if newest else 0
        return
    for alert in list_alerts(index, after_id=st.session_state[K_ALERT_SEEN], limit=5):
        st.session_state[K_ALERT_SEEN] = int(alert["id"])
        # literal text: a toast renders Markdown links and images, and the file's name is
        # anyone's who may write to the watched folder
        st.toast(t("Alert: {statement} in {name} at {start} s",
                   statement=md_escape(alert["statement"][:80]),
                   name=md_escape(Path(alert["path"]).name),
                   start=f"{alert['start_s']:.1f}"), icon=":material/notifications_active:")


def start_watches() -> None:
    """Start ``CHORD_WATCH``'s watchers (once per server); a bad setting is said in the
    sidebar, never a crash of the page."""
    try:
        resources.watches()
    except ChordError as exc:
        st.sidebar.error(f"{md_escape(exc.message)}  \n{md_escape(exc.hint)}",
                         icon=":material/folder_off:")
