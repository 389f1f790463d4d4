"""Plain-words text for the Analyze page, in the interface language: the plan said in words,
the grounding outcome, time left, queue position, notes grouped. Pure functions (the
language is an argument), so they are unit-tested without Streamlit.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from chord_core.types import SamplingPlan
from chord_ui.i18n import translate

_NUMBERS = re.compile(r"\d+(\.\d+)?")


def detail_level(plan: SamplingPlan) -> str:
    """How sharply each frame is seen, from its short side in pixels."""
    short = min(plan.input_wh) if plan.input_wh else 0
    if short >= 540:
        return "in high detail"
    if short >= 300:
        return "in medium detail"
    return "in low detail"


def plan_words(plan: SamplingPlan, duration_s: float, lang: str) -> str:
    """``Chord will look at 60 pictures from across the clip (about 2 a second), in high
    detail.`` — the numbers behind it are shown on request."""
    n = plan.num_frames
    if n <= 1:
        return translate("Chord will look at one picture, {detail}.", lang,
                         detail=translate(detail_level(plan), lang))
    rate = n / duration_s if duration_s > 0 else plan.fps
    if rate >= 1:
        how = translate("about {n} a second", lang, n=f"{rate:.0f}")
    else:
        how = translate("about one every {s} seconds", lang, s=f"{1 / max(rate, 1e-6):.0f}")
    return translate("Chord will look at {n} pictures from across the clip ({how}), {detail}.",
                     lang, n=n, how=how, detail=translate(detail_level(plan), lang))


def plan_numbers(plan: SamplingPlan, lang: str) -> str:
    w, h = plan.input_wh
    return translate("{n} frames × {w}×{h} · {tokens} visual tokens · {fps} fps", lang,
                     n=plan.num_frames, w=w, h=h, tokens=f"{plan.visual_tokens:,}",
                     fps=f"{plan.fps:.2f}")


def merged_spans(segments: Iterable[Any]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for seg in sorted(segments, key=lambda s: s.start_s):
        if merged and seg.start_s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], seg.end_s)
        else:
            merged.append([seg.start_s, seg.end_s])
    return [(a, b) for a, b in merged]


def ground_summary(result: Any, lang: str) -> str:
    """``“the red car” appears in 2 segments: 3.5–7.0 s, 12.0–15.5 s`` (or not found)."""
    target = result.query or translate("the target", lang)
    spans = merged_spans(result.segments)
    if not spans:
        return translate("“{target}” not found in {n} sampled frames", lang, target=target,
                         n=result.sampling.num_frames)
    text = ", ".join(f"{a:.1f} s" if a == b else f"{a:.1f}–{b:.1f} s" for a, b in spans)
    key = ("“{target}” appears in 1 segment: {spans}" if len(spans) == 1
           else "“{target}” appears in {n} segments: {spans}")
    out = translate(key, lang, target=target, n=len(spans), spans=text)
    tracks = len({s.track_id for s in result.segments})
    if tracks > 1:
        out += translate(" ({n} tracks)", lang, n=tracks)
    return out


def progress_value(fraction: float, elapsed_s: float, left_s: float | None) -> float:
    """The bar: elapsed / (elapsed + left) once time left is known (it then moves evenly
    with time), else the stage-weighted fraction."""
    if left_s is None or elapsed_s <= 0:
        return fraction
    return min(0.99, max(fraction * 0.5, elapsed_s / (elapsed_s + left_s)))


def queue_position(job_id: str, statuses: Iterable[Any]) -> int | None:
    """1-based place of a queued job among the queued jobs (oldest first), else None."""
    queued = sorted((s for s in statuses if s.state.value == "queued"),
                    key=lambda s: s.submitted_at)
    for n, s in enumerate(queued, 1):
        if s.job_id == job_id:
            return n
    return None


def grouped_notes(warnings: Sequence[str]) -> list[tuple[str, int]]:
    """Notes with the same wording (numbers aside) shown once, with how often they came."""
    groups: dict[str, list[Any]] = {}
    for w in warnings:
        key = _NUMBERS.sub("#", w.split(": ", 1)[-1] if w.startswith("frame") else w)[:80]
        groups.setdefault(key, [w, 0])[1] += 1
    return [(first, n) for first, n in groups.values()]


def long_plan_words(s: Any, duration_s: float, task: str, lang: str) -> str:
    """What a long-video run will really do, in words (``s``: LongVideoSettings): how many
    chunks of about what length, described on how many pictures, merged into about how many
    chapters; or how many pictures grounded, one every how many seconds, in how many jobs.
    Counts are "about": scene cuts decide the real chunks."""
    import math

    if task == "describe":
        chunks = max(1, math.ceil(duration_s / s.chunk_s))
        pictures = max(1, min(s.describe_max_frames, math.ceil(s.chunk_s * s.describe_fps)))
        chapters = max(1, min(s.max_chapters, round(duration_s / s.chapter_s)))
        return translate("Chord will describe about {chunks} chunks of about {chunk} each, "
                         "{pictures} pictures per chunk, and merge them into about {chapters} "
                         "chapter(s).", lang, chunks=chunks, chunk=_seconds(s.chunk_s, lang),
                         pictures=pictures, chapters=chapters)
    frames = max(1, math.floor(duration_s * s.ground_fps))
    jobs = max(1, math.ceil(frames / s.ground_chunk_frames))
    return translate("Chord will look for the target in {frames} pictures, one every {every}, "
                     "in {jobs} jobs of up to {per} pictures.", lang, frames=f"{frames:,}",
                     every=_seconds(1.0 / s.ground_fps, lang), jobs=jobs,
                     per=s.ground_chunk_frames)


def _seconds(value: float, lang: str) -> str:
    if value >= 60 and value % 60 == 0:
        return translate("{n} min", lang, n=f"{value / 60:g}")
    return translate("{n} s", lang, n=f"{value:g}")
