"""Review page body: the watched footage's review items, looked at one by one and marked.

Items (chord_core.library.review): every alert of a standing check and every detection of
a watched target. The page: filters (source, severity, reviewed, words of the statement,
day; kept in the URL), a timeline of the chosen day with one row per source and each item
on it (reviewed ones hollow), the current item (its frame, clip, span, statement, score,
who reviewed it when) with its player opening at the item's moment, and the keys:
**J** next, **K** previous, **M** mark reviewed (and go to the next), **P** play, **A** add
to the case. "Mark all reviewed" marks every item the filters show. Items go into a named
case, exported as a folder and a ZIP (chord_core.library.case_export).
"""

from __future__ import annotations

import logging
import shutil
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_ui import resources
from chord_ui.formatting import md_escape, plot_escape
from chord_ui.i18n import choice_key, t
from chord_ui.library_view import _thumb
from chord_ui.uploads import browser_playable, servable

log = logging.getLogger(__name__)

K_POS, K_PLAY, K_CASE, K_EXPORTED = "review_pos", "review_play", "review_case", "review_export"
REVIEWED = ("unreviewed", "reviewed", "all")
SEVERITY = ("", "alert", "detection")
ME = "app"  # who marks from the app (the app has no user accounts: the browser on this machine)


def _param(name: str, default: str = "") -> str:
    return str(st.query_params.get(name) or default)[:200]


def _set_param(name: str, value: str) -> None:
    if value:
        st.query_params[name] = value
    elif name in st.query_params:
        del st.query_params[name]


def filters() -> Any:
    """The filter row (its values in the URL); returns ``ReviewFilters``."""
    from chord_core.library.review import ReviewFilters, items

    every = items(resources.library_index(), limit=1000)
    sources = [""] + sorted({i["source"] for i in every})
    days = [""] + sorted({i["day"] for i in every}, reverse=True)
    cols = st.columns([3, 2, 2, 3, 2])
    source = cols[0].selectbox(t("Source"), sources, index=_index(sources, _param("source")),
                               format_func=lambda s: t("All sources") if not s else s,
                               key=choice_key("review-source"))
    severity = cols[1].selectbox(t("Severity"), SEVERITY,
                                 index=_index(SEVERITY, _param("severity")),
                                 format_func=lambda s: t(s) if s else t("Any severity"),
                                 key=choice_key("review-severity"))
    shown = cols[2].selectbox(t("Show"), REVIEWED,
                              index=_index(REVIEWED, _param("reviewed", "unreviewed")),
                              format_func=t, key=choice_key("review-reviewed"))
    words = cols[3].text_input(t("Statement"), value=_param("statement"),
                               placeholder=t("Words of the statement or target"),
                               key="review-statement")
    day = cols[4].selectbox(t("Day"), days, index=_index(days, _param("day")),
                            format_func=lambda d: t("Every day") if not d else d,
                            key=choice_key("review-day"))
    for name, value in (("source", source), ("severity", severity), ("statement", words),
                        ("day", day), ("reviewed", "" if shown == "unreviewed" else shown)):
        _set_param(name, value)
    reviewed = {"unreviewed": False, "reviewed": True}.get(shown)
    return ReviewFilters(source, severity, reviewed, words.strip()[:200], day)


def _index(options: Any, value: str) -> int:
    return list(options).index(value) if value in options else 0


def _move(step: int, n: int) -> None:
    st.session_state[K_POS] = max(0, min(n - 1, int(st.session_state.get(K_POS, 0)) + step))
    st.session_state[K_PLAY] = False


def _mark(item_id: str, reviewed: bool) -> None:
    from chord_core.library.review import mark

    mark(resources.library_index(), [item_id], reviewed=reviewed, by=ME)


def _mark_all(f: Any) -> None:
    from chord_core.library.review import mark_all

    n = mark_all(resources.library_index(), f, by=ME)
    st.session_state[K_POS] = 0
    st.toast(t("Marked {n} item(s) reviewed.", n=n))


def timeline_figure(found: list[dict[str, Any]], current: str) -> Any:
    """One row per source, each item a marker at the time of day it happened (``at``, UTC:
    the clip file's time plus the moment)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for severity, symbol in (("alert", "diamond"), ("detection", "circle")):
        for reviewed in (False, True):
            group = [i for i in found if i["severity"] == severity and i["reviewed"] == reviewed]
            if not group:
                continue
            fig.add_trace(go.Scatter(
                x=[datetime.fromtimestamp(i["at"], tz=timezone.utc) for i in group],
                y=[plot_escape(Path(i["source"]).name or i["source"]) for i in group],
                mode="markers", name=f"{t(severity)} · {t('reviewed' if reviewed else 'unreviewed')}",
                marker={"symbol": symbol + ("-open" if reviewed else ""), "size": 13,
                        "color": "#dc2626" if severity == "alert" else "#2563eb",
                        "line": {"width": [3 if i["id"] == current else 1 for i in group],
                                 "color": "#111827"}},
                text=[plot_escape(f"{i['clip']} {i['start_s']:.1f} s: {i['statement'][:80]}")
                      for i in group], hoverinfo="text", customdata=[i["id"] for i in group]))
    fig.update_layout(height=140 + 30 * len({i["source"] for i in found}),
                      margin={"l": 10, "r": 10, "t": 10, "b": 30},
                      legend={"orientation": "h", "y": -0.4},
                      xaxis={"title": None, "tickformat": "%H:%M:%S"})
    return fig


def _picked(key: str, ids: list[str]) -> None:
    """A marker clicked on the timeline: its item becomes the current one."""
    points = ((st.session_state.get(key) or {}).get("selection") or {}).get("points") or []
    picked = points[0].get("customdata") if points else None
    if isinstance(picked, list):
        picked = picked[0] if picked else None
    if picked in ids:
        st.session_state[K_POS] = ids.index(picked)
        st.session_state[K_PLAY] = False


def timeline(found: list[dict[str, Any]], current: str) -> None:
    """The newest three days, each a chart with a row per source; a click picks an item."""
    from chord_core.library.review import timeline as by_day

    ids = [i["id"] for i in found]
    for day, sources in sorted(by_day(found).items(), reverse=True)[:3]:
        items = [i for per in sources.values() for i in per]
        st.caption(t("{day}: {n} item(s) from {s} source(s)", day=day, n=len(items),
                     s=len(sources)))
        key = f"review-timeline-{day}"
        st.plotly_chart(timeline_figure(items, current), key=key,
                        on_select=partial(_picked, key, ids), selection_mode="points",
                        config={"displayModeBar": False})


def keys(found: list[dict[str, Any]], pos: int, f: Any) -> None:
    """The review buttons, each with its key."""
    item = found[pos]
    bar = st.container(horizontal=True, key="review-keys")
    bar.button(t("Previous item"), shortcut="K", icon=":material/arrow_upward:",
               on_click=_move, args=(-1, len(found)), disabled=pos == 0, key="review-prev")
    bar.button(t("Next item"), shortcut="J", icon=":material/arrow_downward:",
               on_click=_move, args=(1, len(found)), disabled=pos >= len(found) - 1,
               key="review-next")
    if item["reviewed"]:
        bar.button(t("Mark not reviewed"), icon=":material/undo:", key="review-unmark",
                   on_click=_mark, args=(item["id"], False))
    else:
        bar.button(t("Mark reviewed"), shortcut="M", icon=":material/done:", type="primary",
                   key="review-mark", on_click=_mark_reviewed, args=(item["id"], f, len(found)))
    bar.button(t("Play"), shortcut="P", icon=":material/play_arrow:", key="review-play",
               on_click=st.session_state.__setitem__, args=(K_PLAY, True))
    bar.button(t("Mark all reviewed"), icon=":material/done_all:", key="review-mark-all",
               on_click=_mark_all, args=(f,))


def _mark_reviewed(item_id: str, f: Any, n: int) -> None:
    _mark(item_id, True)
    if f.reviewed is not False:  # the item stays in the list: go on to the next one
        _move(1, n)
    st.session_state[K_PLAY] = False


def current(item: dict[str, Any]) -> None:
    """The item in full: frame, facts, and the player at its moment."""
    from chord_core.library.ask import clock

    path = item["path"]
    shown = servable(path)
    with st.container(border=True, key="review-current"):
        left, right = st.columns([1, 2])
        with left:
            if shown:
                _thumb(path, item["thumbnail_s"])  # library_view's: under the media roots
        with right:
            score = "—" if item["score"] is None else f"{item['score']:.2f}"
            st.markdown(t("**{clip}** · {start}–{end} · {severity} · score {score}",
                          clip=md_escape(item["clip"]), start=clock(item["start_s"]),
                          end=clock(item["end_s"]), severity=t(item["severity"]), score=score))
            st.markdown(md_escape(item["statement"]))
            st.caption(md_escape(item["source"]))
            if item["reviewed"]:
                when = datetime.fromtimestamp(item["reviewed_at"], tz=timezone.utc)
                st.caption(t("Reviewed by {who} at {when} UTC", who=md_escape(
                    item["reviewed_by"] or "—"), when=f"{when:%Y-%m-%d %H:%M}"))
            else:
                st.caption(t("Not reviewed yet"))
        if not shown:
            st.caption(t("The clip is gone or outside the media roots: no thumbnail or "
                         "playback."))
        elif st.session_state.get(K_PLAY) and browser_playable(path):
            _player(item)
        elif st.session_state.get(K_PLAY):
            st.caption(t("This container does not play in a browser; open the clip in "
                         "Analyze for its preview."))


def _player(item: dict[str, Any]) -> None:
    """The result player (frame-exact seeks, a seek bar) opened at the item's moment, its
    span marked on the timeline. st.video cannot: its start time is whole seconds."""
    from chord_core.analysis.request import probe_input
    from chord_ui.player import _component, long_player_data, media_url

    try:
        info = probe_input(item["path"])
    except ChordError as exc:
        st.caption(md_escape(exc.message))
        return
    key = f"review-{item['id']}"
    data = long_player_data(info, media_url(item["path"], f"chord-player-{key}"), key,
                            chapters=[], ranges=[{"start": item["start_s"],
                                                  "end": item["end_s"],
                                                  "label": item["statement"]}])
    _component()(data=data | {"start_s": round(float(item["start_s"]), 4)},
                 key=f"player-{key}")


def item_list(found: list[dict[str, Any]], pos: int) -> None:
    """Every listed item in one line each; the current one marked."""
    from chord_core.library.ask import clock

    lines = []
    for n, item in enumerate(found[:200]):
        mark = "▶" if n == pos else ("✓" if item["reviewed"] else "•")
        lines.append(f"{mark} {md_escape(item['clip'])} {clock(item['start_s'])} · "
                     f"{t(item['severity'])} · {md_escape(item['statement'][:90])}")
    st.markdown("  \n".join(lines))


def body() -> None:
    from chord_core.library.review import items

    f = filters()
    found = items(resources.library_index(), f, limit=1000)
    if not found:
        st.info(t("No review items here. Alerts of standing checks and detections of watched "
                  "targets appear here as the watched folders find them."))
        case_box(None)
        return
    pos = max(0, min(len(found) - 1, int(st.session_state.get(K_POS, 0))))
    st.session_state[K_POS] = pos
    unreviewed = sum(not i["reviewed"] for i in found)
    st.caption(t("Item {n} of {total} · {left} not reviewed · keys: J next, K previous, "
                 "M mark reviewed, P play, A add to the case", n=pos + 1, total=len(found),
                 left=unreviewed))
    timeline(found, found[pos]["id"])
    keys(found, pos, f)
    current(found[pos])
    case_box(found[pos])
    with st.expander(t("All listed items ({n})", n=len(found))):
        item_list(found, pos)


def _add_to_case(item: dict[str, Any]) -> None:
    from chord_core.library.cases import add_review_item

    name = str(st.session_state.get(K_CASE) or "").strip()
    try:
        added = add_review_item(resources.library_index(), name, item)
        st.toast(t("Added to case {name}.", name=md_escape(name)) if added else
                 t("Already in case {name}.", name=md_escape(name)))
    except ChordError as exc:  # a toast is Markdown: the message may name a clip
        st.toast(md_escape(f"{exc.message} — {exc.hint}"))


def case_box(item: dict[str, Any] | None) -> None:
    """The case the items go into (the current item is added with A), and its export."""
    from datetime import date

    st.session_state.setdefault(K_CASE, f"review {item['day'] if item else date.today()}")
    cols = st.columns([3, 1, 1])
    cols[0].text_input(t("Case"), key=K_CASE, help=t("A name for the moments you collect"))
    if item is not None:
        cols[1].button(t("Add to case"), shortcut="A", icon=":material/playlist_add:",
                       key="review-add-case", on_click=_add_to_case, args=(item,))
    if cols[2].button(t("Export case"), icon=":material/folder_zip:", key="review-export"):
        _export(str(st.session_state.get(K_CASE) or ""))
    exported = st.session_state.get(K_EXPORTED)
    if exported and Path(exported).is_file():
        st.caption(t("Case written to {path}", path=md_escape(Path(exported).with_suffix(""))))
        st.download_button(t("Download the case (ZIP)"), Path(exported).read_bytes(),
                           file_name=Path(exported).name, mime="application/zip",
                           key="review-download", icon=":material/download:")


def _export(name: str) -> None:
    from chord_core.library.case_export import export_case
    from chord_ui.uploads import exports_dir

    try:
        folder = export_case(resources.library_index(), name, exports_dir() / "cases")
        archive = shutil.make_archive(str(folder), "zip", folder.parent, folder.name)
        st.session_state[K_EXPORTED] = archive
    except (ChordError, OSError) as exc:
        message = exc.message if isinstance(exc, ChordError) else str(exc)
        st.error(md_escape(message), icon=":material/error:")
