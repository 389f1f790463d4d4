"""The in-page player for grounding results: the clip (or its H.264 preview) in an HTML5
video, the boxes drawn client-side on a canvas in sync with playback, and a timeline whose
segments seek the player. ←/→ step one video frame, Space plays and pauses. Everything else
on the page that names a moment (key frames, detection rows, the statement chart, chapter
cards, search hits) seeks it too, through ``seek_to`` (a numbered request in the session, so
the same moment clicked twice seeks twice and a rerun seeks nobody).

An ``st.components.v2`` component with the JavaScript and CSS shipped in ``chord_ui/static``
(inline: nothing is fetched from the internet). Python hands it plain JSON built by
``player_data``; the script sets every text with ``textContent``, so file names, targets and
model text are never parsed as HTML. The clip is served by Streamlit's media endpoint, and
only files ``uploads.servable`` allows (media roots, uploads, previews).
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any

import streamlit as st

from chord_core.types import Result
from chord_ui.i18n import t

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
UNLINKED = -1


def _labels() -> dict[str, str]:
    return {"player": t("Result player"), "play": t("Play"), "pause": t("Pause"),
            "prev_frame": t("Previous frame (←)"), "next_frame": t("Next frame (→)"),
            "frame": t("frame"), "boxes": t("box(es)"), "sampled": t("sampled frames"),
            "jump_to": t("Jump to"), "chapters": t("Chapters"), "found": t("Found"),
            "seek": t("Seek bar: drag to any moment"),
            "keys": t("Click the player, then ←/→ step one frame, Space plays or pauses")}


def track_name(track_id: int, label: str) -> str:
    """``#1 dog`` — the name a track has in the player, its timeline and the box tags."""
    if track_id < 1:
        return t("unlinked")
    return f"#{track_id}" + (f" {label}" if label else "")


def seek_to(key: str, t_s: float) -> None:
    """Ask the player of ``key`` to move to ``t_s`` on the next run (an ``on_click``)."""
    name = f"chord-seek-{key}"
    n = int((st.session_state.get(name) or {}).get("n", 0)) + 1
    st.session_state[name] = {"t": round(max(0.0, float(t_s)), 4), "n": n}


def pending_seek(key: str) -> dict[str, Any] | None:
    """The latest seek request of ``key``'s player (``{"t", "n"}``), if any."""
    return st.session_state.get(f"chord-seek-{key}")


def seek_on_select(key: str, widget_key: str, times: list[float] | None = None) -> None:
    """``on_select`` callback of a table (``times``: each row's time) or a chart (its points'
    x): seek ``key``'s player to the selected moment. Callbacks run before the page does,
    so the player placed above the table already gets the request."""
    sel = (st.session_state.get(widget_key) or {}).get("selection") or {}
    rows = list(sel.get("rows") or [])
    points = list(sel.get("points") or [])
    if times is not None and rows and 0 <= rows[0] < len(times):
        seek_to(key, times[rows[0]])
    elif points and points[0].get("x") is not None:
        seek_to(key, float(points[0]["x"]))


def player_data(result: Result, src: str, key: str, start_s: float = 0.0) -> dict[str, Any]:
    """Everything the player needs, as JSON-ready data (no HTML anywhere)."""
    from chord_core.analysis.render import result_max_gap, track_color_hex

    video = result.video
    fps = video.fps if video.fps > 0 else 25.0
    labels = {tr.track_id: tr.label for tr in result.tracks}
    dets = [{"t": round(d.t_s, 4), "box": [round(c, 5) for c in d.bbox], "track": d.track_id,
             "label": d.label, "color": track_color_hex(d.track_id)}
            for d in sorted(result.detections, key=lambda d: d.t_s)]
    rows: dict[int, dict[str, Any]] = {}

    def row(track_id: int, label: str) -> dict[str, Any]:
        tid = track_id if track_id >= 1 else UNLINKED
        if tid not in rows:
            rows[tid] = {"track": tid, "name": track_name(tid, labels.get(tid, label)),
                         "color": track_color_hex(tid), "segments": [], "marks": []}
        return rows[tid]

    for seg in sorted(result.segments, key=lambda s: s.start_s):
        row(seg.track_id, seg.label)["segments"].append([round(seg.start_s, 4),
                                                         round(seg.end_s, 4)])
    for d in dets:
        row(d["track"], d["label"])["marks"].append(d["t"])
    ordered = [rows[k] for k in sorted(rows, key=lambda k: (k < 1, k))]
    times = list(result.sampling.timestamps_s)
    duration = max(video.duration_s, times[-1] if times else 0.0, 0.1)
    return {"src": src, "key": key, "fps": fps, "duration": round(duration, 4),
            "width": max(1, video.width), "height": max(1, video.height),
            "snap_s": 0.5 / fps, "max_gap_s": result_max_gap(result),
            "start_s": round(start_s, 4), "seek": pending_seek(key), "detections": dets,
            "rows": ordered,
            "samples": [round(x, 4) for x in times], "labels": _labels()}


def timeline_marks(chapters: list[dict[str, Any]] | None = None,
                   ranges: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Chapters (``start``, ``end``, ``title``: a clickable row that seeks) and found ranges
    (``start``, ``end``, ``label``: highlighted on the timeline) for the player's data."""
    def clean(items: list[dict[str, Any]] | None, text: str) -> list[dict[str, Any]]:
        return [{"start": round(float(i["start"]), 4), "end": round(float(i["end"]), 4),
                 "text": str(i.get(text, ""))[:200]} for i in items or ()]

    return {"chapters": clean(chapters, "title"), "ranges": clean(ranges, "label")}


def long_player_data(video: Any, src: str, key: str, *, chapters: list[dict[str, Any]],
                     ranges: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The player without boxes: a long clip with its chapters (and search ranges)."""
    fps = video.fps if video.fps > 0 else 25.0
    return {"src": src, "key": key, "fps": fps, "duration": round(max(video.duration_s, 0.1), 4),
            "width": max(1, video.width), "height": max(1, video.height), "snap_s": 0.5 / fps,
            "max_gap_s": 0.0, "start_s": 0.0, "seek": pending_seek(key), "detections": [],
            "rows": [], "samples": [],
            "labels": _labels()} | timeline_marks(chapters, ranges)


def show_long_player(video: Any, video_path: str, key: str, *, chapters: list[dict[str, Any]],
                     ranges: list[dict[str, Any]] | None = None) -> None:
    """Mount the player for a long clip: chapters on the timeline, search ranges marked."""
    src = media_url(video_path, f"chord-player-{key}")
    _component()(data=long_player_data(video, src, key, chapters=chapters, ranges=ranges),
                 key=f"player-{key}")


@cache
def _component() -> Any:
    return st.components.v2.component(
        "chord_player", js=(STATIC / "player.js").read_text(encoding="utf-8"),
        css=(STATIC / "player.css").read_text(encoding="utf-8"))


def media_url(path: str, coordinates: str) -> str:
    """A ``/media/…`` URL for a file the page may show (the caller checks ``servable``);
    the same endpoint ``st.video`` uses, kept while this session shows it."""
    from streamlit import runtime

    from chord_core.errors import InputError
    from chord_core.media.confined import opened
    from chord_core.media.roots import job_roots

    if not runtime.exists():  # AppTest / bare mode: no media endpoint
        return ""
    try:  # read while added: the file opened under the roots now, not what a link names
        with opened(path, job_roots()) as (name, _):
            return runtime.get_instance().media_file_mgr.add(name, "video/mp4", coordinates)
    except InputError:
        return ""


def show_player(result: Result, video_path: str, key: str, start_s: float = 0.0) -> None:
    """Mount the player for ``result`` playing ``video_path`` (browser-playable, servable)."""
    src = media_url(video_path, f"chord-player-{key}")
    _component()(data=player_data(result, src, key, start_s), key=f"player-{key}",
                 on_decode_error_change=lambda: undecodable().add(video_path))


K_UNDECODABLE = "chord-undecodable"


def undecodable() -> set[str]:
    """Files whose player reported a decode error (the video element's ``error`` event):
    the clip's view then plays a transcoded preview of them instead."""
    return st.session_state.setdefault(K_UNDECODABLE, set())
