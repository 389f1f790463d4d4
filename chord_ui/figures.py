"""Pure Plotly figure builders: data in, ``go.Figure`` out. No Streamlit, no I/O.

- ``timeline_figure``: where a grounded target is in time — one row per track, segments as
  bars, every detection as a marker, sampled frames as a faint rug, an optional cursor.
- ``history_figure``: rolling line charts (GPU utilisation, memory, CPU, RAM).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import plotly.graph_objects as go

from chord_ui.formatting import plot_escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777",
           "#65a30d")
SAMPLED_ROW = "sampled frames"


def track_color(track_id: int) -> str:
    """The track's colour — the same one ``chord_core.analysis.render`` draws its boxes in."""
    from chord_core.analysis.render import track_color_hex

    return track_color_hex(track_id)


def _row_name(track_id: int, label: str) -> str:
    if track_id < 0:
        return "unlinked"
    return f"track {track_id}" + (f" · {plot_escape(label)}" if label else "")  # model text


def _track_rows(result: Any) -> dict[int, str]:
    rows: dict[int, str] = {}
    for tr in result.tracks:
        rows[tr.track_id] = _row_name(tr.track_id, tr.label)
    for det in result.detections:
        rows.setdefault(det.track_id, _row_name(det.track_id, det.label))
    for seg in result.segments:
        rows.setdefault(seg.track_id, _row_name(seg.track_id, seg.label))
    return rows


def _segment_traces(result: Any, rows: Mapping[int, str]) -> list[go.Bar]:
    traces = []
    for seg in result.segments:
        length = max(seg.end_s - seg.start_s, 0.05)
        traces.append(go.Bar(
            x=[length], base=[seg.start_s], y=[rows[seg.track_id]], orientation="h",
            marker={"color": track_color(seg.track_id), "opacity": 0.35},
            width=0.6, showlegend=False, name=rows[seg.track_id],
            hovertemplate=f"{seg.start_s:.2f}–{seg.end_s:.2f} s<extra>{rows[seg.track_id]}"
                          "</extra>"))
    return traces


def _detection_traces(result: Any, rows: Mapping[int, str]) -> list[go.Scatter]:
    by_track: dict[int, list[Any]] = {}
    for det in result.detections:
        by_track.setdefault(det.track_id, []).append(det)
    traces = []
    for track_id, dets in sorted(by_track.items()):
        traces.append(go.Scatter(
            x=[d.t_s for d in dets], y=[rows[track_id]] * len(dets), mode="markers",
            marker={"color": track_color(track_id), "size": 9, "symbol": "diamond",
                    "line": {"width": 1, "color": "white"}},
            name=rows[track_id], showlegend=False,
            customdata=[[d.frame_index, *[round(v, 3) for v in d.bbox]] for d in dets],
            hovertemplate="t=%{x:.2f} s · frame %{customdata[0]}<br>box [%{customdata[1]}, "
                          "%{customdata[2]}, %{customdata[3]}, %{customdata[4]}]<extra>"
                          f"{rows[track_id]}</extra>"))
    return traces


def timeline_figure(result: Any, cursor_s: float | None = None, height: int | None = None
                    ) -> go.Figure:
    """Segments per track + detection markers over the clip's duration."""
    rows = _track_rows(result)
    # Plotly draws the first category at the bottom: sampled frames, unlinked, then tracks
    # so that track 1 ends up on top.
    order = [SAMPLED_ROW] + [rows[k] for k in sorted(rows, key=lambda k: (k >= 0, -k))]
    fig = go.Figure()
    times = list(result.sampling.timestamps_s)
    fig.add_trace(go.Scatter(
        x=times, y=[SAMPLED_ROW] * len(times), mode="markers", showlegend=False,
        marker={"symbol": "line-ns-open", "size": 10, "color": "#9ca3af"},
        name=SAMPLED_ROW, hovertemplate="sampled frame at %{x:.2f} s<extra></extra>"))
    for trace in _segment_traces(result, rows) + _detection_traces(result, rows):
        fig.add_trace(trace)
    duration = max(result.video.duration_s, times[-1] if times else 0.0, 0.1)
    if cursor_s is not None:
        fig.add_vline(x=cursor_s, line={"color": "#111827", "width": 1.5, "dash": "dot"})
    if not result.detections:
        fig.add_annotation(text="no detections", x=duration / 2, y=SAMPLED_ROW,
                           yshift=28, showarrow=False, font={"color": "#6b7280"})
    fig.update_layout(
        height=height or 110 + 42 * len(order), margin={"l": 10, "r": 10, "t": 10, "b": 40},
        barmode="overlay", bargap=0.3, hovermode="closest",
        xaxis={"title": "time (s)", "range": [0, duration], "showgrid": True,
               "zeroline": False},
        yaxis={"categoryorder": "array", "categoryarray": order, "title": None,
               "automargin": True})
    return fig


def history_figure(series: Mapping[str, Sequence[tuple[float, float | None]]], *, title: str,
                   y_title: str, y_range: tuple[float, float] | None = None,
                   window_s: float = 300.0, height: int = 220) -> go.Figure:
    """Rolling line chart. ``series`` maps a name to (seconds-ago ≤ 0, value) points."""
    fig = go.Figure()
    for i, (name, points) in enumerate(series.items()):
        fig.add_trace(go.Scatter(
            x=[p[0] for p in points], y=[p[1] for p in points], mode="lines", name=name,
            line={"color": PALETTE[i % len(PALETTE)], "width": 2}, connectgaps=False,
            hovertemplate="%{y:.1f} " + y_title + " · %{x:.0f} s<extra>" + name + "</extra>"))
    fig.update_layout(
        title={"text": title, "font": {"size": 14}}, height=height,
        margin={"l": 10, "r": 10, "t": 36, "b": 30}, showlegend=len(series) > 1,
        legend={"orientation": "h", "y": -0.25},
        xaxis={"range": [-window_s, 0], "title": None, "ticksuffix": " s"},
        yaxis={"title": y_title, "range": list(y_range) if y_range else None,
               "rangemode": "tozero"})
    return fig
