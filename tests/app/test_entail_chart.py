"""The statement chart's legend stays clear of its x-axis title (it sat on "time (s)": a
horizontal legend anchored at its bottom at y = -0.3) and inside the figure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chord_ui.entail_view import curve_figure

AXIS_TITLE_PX = 45  # tick labels and the x-axis title below the plot, measured in Chromium
LEGEND_ROW_PX = 22  # one horizontal legend row


@pytest.mark.parametrize("height", [260, 300, 400], ids=["short", "default", "tall"])
def test_the_legend_sits_below_the_axis_title_and_inside_the_figure(height: int) -> None:
    frames = [SimpleNamespace(t_s=i * 0.5, entailment=0.5, neutral=0.3, contradiction=0.2)
              for i in range(6)]
    result = SimpleNamespace(entailment=SimpleNamespace(frames=frames, supporting_s=(1.0,),
                                                        statement="a person crosses"),
                             video=SimpleNamespace(duration_s=3.0))
    layout = curve_figure(result, height=height).layout
    legend, margin = layout.legend, layout.margin
    assert legend.yanchor == "top" and legend.orientation == "h"
    plot_px = height - margin.t - margin.b
    top_px = -legend.y * plot_px  # the legend's top, below the plot's bottom edge
    assert top_px >= AXIS_TITLE_PX, (top_px, plot_px)
    assert top_px + LEGEND_ROW_PX <= margin.b + 12, (top_px, margin.b)  # inside the figure
    assert margin.l >= 50  # the y-axis title clear of its tick labels ("0.8" read "8")
