"""The "Check a statement" results: the verdict, a probability curve over time, the moments
that support or contradict the statement, and exports. Statement text is escaped."""

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

ICONS = {"entailment": ":material/check_circle:", "contradiction": ":material/cancel:",
         "neutral": ":material/help:"}
LABEL_COLORS = {"entailment": "#16a34a", "neutral": "#d97706", "contradiction": "#dc2626"}
MOMENTS_SHOWN = 12


def curve_figure(result: Any, height: int = 260) -> go.Figure:
    """P(label) per sampled frame over time; supporting moments shaded."""
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
        height=height, margin={"l": 10, "r": 10, "t": 30, "b": 40},
        title={"text": plot_escape(ent.statement)[:90], "font": {"size": 13}},
        legend={"orientation": "h", "y": -0.3}, hovermode="x unified",
        xaxis={"title": t("time (s)"), "range": [0, duration]},
        yaxis={"title": t("probability"), "range": [0, 1]})
    return fig


def moments_rows(result: Result) -> list[dict[str, Any]]:
    """The frames, most supporting first: time, frame, and the three probabilities."""
    frames = sorted(result.entailment.frames, key=lambda f: -f.entailment)
    return [{"time (s)": round(f.t_s, 2), "frame": f.frame_index, "verdict": f.label,
             "entailment": round(f.entailment, 3), "neutral": round(f.neutral, 3),
             "contradiction": round(f.contradiction, 3)} for f in frames]


def show(result: Result, clip_name: str, job_id: str) -> None:
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
        st.plotly_chart(curve_figure(result), key=f"curve-{job_id}",
                        config={"displayModeBar": False})
        support = ", ".join(f"{s:.1f} s" for s in ent.supporting_s[:MOMENTS_SHOWN]) or t("none")
        against = (", ".join(f"{s:.1f} s" for s in ent.contradicting_s[:MOMENTS_SHOWN])
                   or t("none"))
        st.markdown(f"{icon} **{t('Supports it at:')}** {support}  \n"
                    f"**{t('Contradicts it at:')}** {against}")
        st.dataframe(moments_rows(result), hide_index=True, height=220, key=f"mom-{job_id}",
                     column_config={k: t(k) for k in ("time (s)", "frame", "verdict",
                                                      "entailment", "neutral", "contradiction")})
    st.caption(t("{model} · {n} frame(s) checked · {total} total",
                 model=md_escape(result.model.id), n=len(ent.frames),
                 total=human_duration(result.timing.total_s)))
    import json

    st.download_button(t("Result (.json)"), json.dumps(result.to_dict(), indent=2),
                       file_name=f"{Path(clip_name).stem}.entail.json", mime="application/json",
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
