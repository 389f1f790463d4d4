"""The Live page: start a stream (an RTSP/RTSPS camera, an HLS playlist, a capture device),
see every stream's state with its last error, its recent chunks (the description, the
alerts) and play a chunk's segment from the moment of an alert. Stop keeps everything.

The streams run in the app's one ``StreamHub`` (``resources.stream_hub``: one per server,
over the shared job manager and store); the page reads their rows and refreshes itself every
``REFRESH_S`` seconds. A stream's URL is shown masked (``rtsp://***@host/…``) — the page
never echoes what was typed once it is started; model text is escaped before it is shown.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_ui.formatting import md_escape
from chord_ui.i18n import t
from chord_ui.uploads import servable, show_video

log = logging.getLogger(__name__)

REFRESH_S = 2.0
K_PLAY = "live_play"
STATE_ICONS = {"connecting": "🟡", "live": "🟢", "stalled": "🟠", "reconnecting": "🟡",
               "stopped": "⚪", "failed": "🔴"}


def hub() -> Any:
    from chord_ui import resources

    return resources.stream_hub()


def start_form() -> None:
    with st.form("live-start", clear_on_submit=True):
        url = st.text_input(t("Stream address"), type="password", max_chars=2048, key="live_url",
                            placeholder="rtsp://user:password@camera.local/stream1",
                            help=t("`rtsp://`, `rtsps://`, `http(s)://….m3u8` or "
                                   "`/dev/videoN`; the password is never shown or stored"))
        cols = st.columns(3)
        chunk_s = cols[0].number_input(t("Chunk length (s)"), 1.0, 600.0, 10.0, 1.0,
                                       key="live_chunk")
        threshold = cols[1].number_input(t("Alert threshold"), 0.0, 1.0, 0.8, 0.05,
                                         key="live_threshold")
        target = cols[2].text_input(t("Target to ground (optional)"), max_chars=200)
        statements = st.text_area(t("Standing checks, one per line (optional)"),
                                  max_chars=16 * 500, key="live_checks",
                                  placeholder=t("a person climbs the fence"))
        describe = st.checkbox(t("Describe each chunk"), value=True, key="live_describe")
        if st.form_submit_button(t("Start"), icon=":material/play_arrow:") and url.strip():
            _start(url, chunk_s, threshold, target, statements, describe)


def _start(url: str, chunk_s: float, threshold: float, target: str, statements: str,
           describe: bool) -> None:
    from chord_core.streams.background import live_settings
    from chord_ui import resources

    lines = tuple(s.strip() for s in statements.splitlines() if s.strip())
    try:
        settings = live_settings(resources.cluster().startup_model, chunk_s=chunk_s,
                                 threshold=threshold, target=target.strip(),
                                 statements=lines or None, describe=describe)
        row = hub().start(url, settings)
    except ChordError as exc:
        st.error(f"{exc.message}\n\n{exc.hint}")
        return
    st.success(t("Started {url}", url=row.get("shown", "")))


@st.fragment(run_every=REFRESH_S)
def streams() -> None:
    rows = hub().list_streams()
    if not rows:
        st.info(t("No stream yet: start one above."))
        return
    for row in rows:
        _stream_card(row)


def _stream_card(row: dict[str, Any]) -> None:
    status = row.get("status") or {}
    with st.container(border=True):
        head = st.columns([6, 1])
        head[0].markdown(f"{STATE_ICONS.get(row['state'], '')} **{t(row['state'])}** · "
                         f"`{_code(row['shown'])}`")
        if row["state"] not in ("stopped", "failed"):
            head[1].button(t("Stop"), key=f"stop-{row['id']}", icon=":material/stop:",
                           on_click=lambda sid=row["id"]: hub().stop(sid))
        if row.get("last_error"):
            st.caption(t("Last error: {e}", e=md_escape(row["last_error"])))
        st.caption(t("{p} packets · {r} reconnects · {j} clock jumps", p=status.get(
            "packets", 0), r=status.get("reconnects", 0), j=status.get("clock_jumps", 0)))
        for chunk in row.get("recent") or []:
            _chunk(row["id"], chunk)


def _chunk(stream_id: str, chunk: dict[str, Any]) -> None:
    from chord_core.library.alerts import list_alerts
    from chord_ui import resources

    when = time.strftime("%H:%M:%S", time.localtime(chunk["start_wall"]))
    text = ""
    job = (chunk.get("jobs") or {}).get("describe")
    if job and chunk["state"] == "done":
        doc = resources.store().get_result(job) or {}
        text = str(doc.get("text") or "")[:400]
    st.markdown(f"`{when}` · {chunk['duration_s']:.1f} s · {t(chunk['state'])}"
                + (f" — {md_escape(text)}" if text else ""))
    if not chunk.get("alerts"):
        return
    alerts = [a for a in list_alerts(resources.library_index(), watch=stream_id, limit=100)
              if a["path"] == chunk["path"]]
    for a in alerts:
        key = f"{stream_id}-{a['id']}"
        cols = st.columns([5, 1])
        cols[0].markdown(t("🔔 **{s}** at {t0} s (P={p})", s=md_escape(a["statement"]),
                           t0=f"{a['start_s']:.1f}", p=f"{a['probability']:.2f}"))
        if servable(a["path"]):
            cols[1].button(t("Play here"), key=f"play-{key}", icon=":material/play_arrow:",
                           on_click=st.session_state.__setitem__, args=(K_PLAY, key))
        if st.session_state.get(K_PLAY) == key:
            show_video(a["path"], start_time=int(a["start_s"]))


def _code(text: str) -> str:
    """Text for a Markdown code span (shown as it is: no escapes there, no backtick)."""
    return str(text).replace("`", "'").replace("\n", " ")


def start_env_streams() -> None:
    """Start the streams ``CHORD_WATCH`` names, once per server (none: nothing started)."""
    from chord_core.config import env_value
    from chord_core.streams.background import is_stream_entry

    text = env_value("CHORD_WATCH")
    if not text or not any(is_stream_entry(e.strip()) for e in text.split(";") if e.strip()):
        return
    from chord_ui import resources

    try:
        resources.env_streams()
    except ChordError as exc:
        log.error("CHORD_WATCH streams not started: %s", exc)
