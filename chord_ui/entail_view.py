"""The "Check a statement" results: the verdict, the clip in the page's player (the moments
that support the statement marked on its timeline), a probability curve over time, the
moments that support or contradict the statement, and exports. A click on the curve or a row
of the moments table moves the player there. Statement text is escaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from chord_core.types import Result
from chord_ui.formatting import (
    VERDICT_WORDS,
    human_duration,
    md_escape,
    plot_escape,
    verdict_line,
)
from chord_ui.i18n import lang, t
from chord_ui.player import seek_on_select, show_long_player
from chord_ui.uploads import ClipSource, servable

ICONS = {"entailment": ":material/check_circle:", "contradiction": ":material/cancel:",
         "neutral": ":material/help:"}
LABEL_COLORS = {"entailment": "#16a34a", "neutral": "#d97706", "contradiction": "#dc2626"}
MOMENTS_SHOWN = 12


# the legend's top in pixels below the plot (under the tick labels and the axis title),
# and the bottom margin that keeps it inside the figure
LEGEND_TOP_PX, LEGEND_MARGIN_PX = 55, 80


def curve_figure(result: Any, height: int = 300) -> go.Figure:
    """P(label) per sampled frame over time; supporting moments shaded. The legend hangs
    from its top below the x-axis title (a legend anchored at its bottom at y = -0.3 sat on
    the title "time (s)"), with a bottom margin that holds both."""
    ent = result.entailment
    fig = go.Figure()
    times = [f.t_s for f in ent.frames]
    for label, color in LABEL_COLORS.items():
        fig.add_trace(go.Scatter(
            x=times, y=[getattr(f, label) for f in ent.frames], mode="lines+markers",
            name=t(label), line={"color": color, "width": 2 if label == "entailment" else 1},
            hovertemplate="%{x:.2f} s · p=%{y:.2f}<extra>" + t(label) + "</extra>"))
    for at in ent.supporting_s:
        fig.add_vrect(x0=at - 0.25, x1=at + 0.25, fillcolor="#16a34a", opacity=0.12,
                      line_width=0)
    duration = max(result.video.duration_s, times[-1] if times else 0.0, 0.1)
    fig.update_layout(
        height=height, margin={"l": 55, "r": 10, "t": 30, "b": LEGEND_MARGIN_PX},
        title={"text": plot_escape(ent.statement)[:90], "font": {"size": 13}},
        legend={"orientation": "h", "yanchor": "top", "x": 0,
                "y": -LEGEND_TOP_PX / max(1, height - 30 - LEGEND_MARGIN_PX)},
        hovermode="x unified",
        xaxis={"title": t("time (s)"), "range": [0, duration]},
        yaxis={"title": t("probability"), "range": [0, 1]})
    return fig


def moments_rows(result: Result) -> list[dict[str, Any]]:
    """The frames, most supporting first: time, frame, and the three probabilities."""
    frames = sorted(result.entailment.frames, key=lambda f: -f.entailment)
    return [{"time (s)": round(f.t_s, 2), "frame": f.frame_index, "verdict": f.label,
             "entailment": round(f.entailment, 3), "neutral": round(f.neutral, 3),
             "contradiction": round(f.contradiction, 3)} for f in frames]


def moments_text(times: tuple[float, ...] | list[float], limit: int = MOMENTS_SHOWN) -> str:
    """``1.0 s, 2.5 s, … (12 of 38)``: the first ``limit`` moments, and how many there are."""
    if not times:
        return t("none")
    shown = ", ".join(f"{s:.1f} s" for s in times[:limit])
    if len(times) <= limit:
        return shown
    return shown + " … " + t("({n} of {total})", n=limit, total=len(times))


def _player(result: Result, clip: ClipSource, job_id: str) -> bool:
    """The clip in the player, supporting moments marked; False where there is none (an
    image, a file outside the roots, no playable preview)."""
    from chord_ui.clip_view import playable_path

    ent = result.entailment
    if len(ent.frames) < 2 or not servable(clip.path):
        return False
    playable = playable_path(clip, result.video)
    if playable is None:
        return False
    ranges = [{"start": max(0.0, s - 0.25), "end": s + 0.25, "label": t("Supports it")}
              for s in ent.supporting_s]
    show_long_player(result.video, playable, job_id, chapters=[], ranges=ranges)
    return True


def _moments(result: Result, job_id: str, icon: str, seekable: bool) -> None:
    ent = result.entailment
    st.markdown(f"{icon} **{t('Supports it at:')}** {moments_text(ent.supporting_s)}  \n"
                f"**{t('Contradicts it at:')}** {moments_text(ent.contradicting_s)}")
    longest = max(len(ent.supporting_s), len(ent.contradicting_s))
    if longest > MOMENTS_SHOWN:
        with st.expander(t("All moments ({n})", n=len(ent.supporting_s)
                           + len(ent.contradicting_s))):
            st.markdown(f"**{t('Supports it at:')}** {moments_text(ent.supporting_s, 10**6)}"
                        f"  \n**{t('Contradicts it at:')}** "
                        f"{moments_text(ent.contradicting_s, 10**6)}")
    key = f"mom-{job_id}"
    rows = moments_rows(result)
    config = {k: t(k) for k in ("time (s)", "frame", "verdict", "entailment", "neutral",
                                "contradiction")}
    if not seekable:
        st.dataframe(rows, hide_index=True, height=220, key=key, column_config=config)
        return
    times = [float(r["time (s)"]) for r in rows]
    st.caption(t("Click the curve or select a row to see that moment in the player."))
    st.dataframe(rows, hide_index=True, height=220, key=key, column_config=config,
                 on_select=lambda: seek_on_select(job_id, key, times),
                 selection_mode="single-row")


def show(result: Result, clip: ClipSource, job_id: str) -> None:
    """The whole view for one entailment result."""
    ent = result.entailment
    if ent is None:
        st.info(t("This result has no statement check."))
        return
    icon = ICONS.get(ent.verdict, ":material/help:")
    st.subheader(_verdict(result))
    if result.model.test_model:
        st.warning(t("**Test model — random weights**: these probabilities are meaningless; "
                     "they only show that the pipeline works."), icon=":material/science:")
    cols = st.columns(3)
    for col, label in zip(cols, ("entailment", "neutral", "contradiction")):
        col.metric(t(label), f"{ent.probabilities.get(label, 0.0):.2f}",
                   help=t("overall probability (see the verdict rule in the README)"))
    if len(ent.frames) > 1:
        viewer, side = st.columns([3, 2], gap="large")
        with viewer:
            seekable = _player(result, clip, job_id)
        with side:
            key = f"curve-{job_id}"
            if seekable:
                st.plotly_chart(curve_figure(result), key=key, config={"displayModeBar": False},
                                on_select=lambda: seek_on_select(job_id, key),
                                selection_mode="points")
            else:
                st.plotly_chart(curve_figure(result), key=key, config={"displayModeBar": False})
        _moments(result, job_id, icon, seekable)
    st.caption(t("{model} · {n} frame(s) checked · {total} total",
                 model=md_escape(result.model.id), n=len(ent.frames),
                 total=human_duration(result.timing.total_s)))
    import json

    st.download_button(t("Result (.json)"), json.dumps(result.to_dict(), indent=2),
                       file_name=f"{Path(clip.name).stem}.entail.json", mime="application/json",
                       key=f"ejson-{job_id}", on_click="ignore", icon=":material/data_object:")


def _verdict(result: Result) -> str:
    """The verdict line (English from chord_ui.formatting), or its Chinese."""
    if lang() != "zh":
        return md_escape(verdict_line(result))
    ent = result.entailment
    p = ent.probabilities.get(ent.verdict, 0.0)
    where = ""
    if ent.verdict == "entailment" and ent.supporting_s and len(ent.frames) > 1:
        where = t(", first at {t} s", t=f"{ent.supporting_s[0]:.1f}")
    return t("“{statement}” {verdict} (p = {p}{where})", statement=md_escape(ent.statement),
             verdict=t(VERDICT_WORDS.get(ent.verdict, ent.verdict)), p=f"{p:.2f}", where=where)
