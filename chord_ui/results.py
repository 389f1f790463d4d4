"""Rendering a finished analysis: description text, or the grounding views, plus downloads.

Everything shown comes from the ``chord.result/v1`` Result; frames are re-read from the clip
on demand (cached) and boxes drawn by ``chord_core.analysis.render``.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from chord_core.errors import ChordError
from chord_core.types import Result
from chord_ui import entail_view
from chord_ui.figures import timeline_figure
from chord_ui.formatting import (
    detections_rows,
    human_duration,
    md_escape,
    plan_summary,
    summary_line,
    test_model_label,
)
from chord_ui.inputs import show_error
from chord_ui.uploads import ClipSource, exports_dir, private_dir, servable

if TYPE_CHECKING:
    import numpy as np

    from chord_ui.session import Outcome

log = logging.getLogger(__name__)

VIEW_MAX_W = 960
THUMB_MAX_W = 360
GALLERY_SIZE = 8


def show_outcome(outcome: Outcome, clip: ClipSource) -> None:
    """Results, or a plain message for failed/cancelled jobs."""
    if outcome.state == "failed":
        show_error(outcome.error or {"message": "the analysis failed"})
        return
    if outcome.state == "cancelled":
        st.info(f"Cancelled after {human_duration(outcome.elapsed_s)}. Press **Run** to "
                "start again.", icon=":material/stop_circle:")
        return
    result = outcome.result
    if result is None:
        return
    if not servable(clip.path):
        st.warning(f"The video file at {md_escape(clip.path)} is gone or outside the media "
                   "roots, so its frames cannot be shown. Everything below comes from the "
                   "stored result.",
                   icon=":material/hide_image:")
    if result.task == "ground":
        _grounding(result, clip, outcome.job_id)
    elif result.task == "entail":
        entail_view.show(result, clip.name, outcome.job_id)
    else:
        _description(result, clip, outcome.job_id)
    _notes(result)


def _meta_caption(result: Result) -> None:
    model = md_escape(result.model.id) + (f" · {test_model_label()}"
                                          if result.model.test_model else "")
    st.caption(f"{model} · {plan_summary(result.sampling)} · "
               f"{human_duration(result.timing.total_s)} total{_method_note(result)}")


def _method_note(result: Result) -> str:
    """Two-pass grounding: how many frames were grounded, inside which spans."""
    if result.method != "two_pass" or result.grounded_frames is None:
        return ""
    spans = ", ".join(f"{a:.1f}–{b:.1f} s" for a, b in result.spans[:6]) or "none"
    return (f" · two-pass: {len(result.grounded_frames)} of {result.sampling.num_frames} "
            f"frames grounded (spans {spans})")


def _test_badge(result: Result) -> None:
    if result.model.test_model:
        st.warning(f"**{test_model_label()}** — this output is meaningless; it only shows "
                   "that the pipeline works.", icon=":material/science:")


# -- describe ---------------------------------------------------------------------------------

def _description(result: Result, clip: ClipSource, job_id: str) -> None:
    st.subheader("Description")
    _test_badge(result)
    text = result.text.strip() or "(the model returned no text)"
    with st.container(border=True):
        st.markdown(md_escape(text))  # model text is shown as written, never rendered
    with st.expander("Plain text (copy)", icon=":material/content_copy:"):
        st.code(text, language=None, wrap_lines=True)
    _meta_caption(result)
    cols = st.columns(3)
    _json_button(cols[0], result, clip, job_id)
    cols[1].download_button("Text (.txt)", text, file_name=f"{Path(clip.name).stem}.txt",
                            mime="text/plain", key=f"txt-{job_id}", on_click="ignore",
                            icon=":material/description:", width="stretch")


# -- ground -----------------------------------------------------------------------------------

def _grounding(result: Result, clip: ClipSource, job_id: str) -> None:
    st.subheader(md_escape(summary_line(result)))
    _test_badge(result)
    _meta_caption(result)
    result = _score_filter(result, job_id)
    times = list(result.sampling.timestamps_s)
    scrub_key = f"scrub-{job_id}"
    default = _first_hit(result)
    cursor = times[st.session_state.get(scrub_key, default)] if times else None
    st.plotly_chart(timeline_figure(result, cursor_s=cursor), key=f"timeline-{job_id}",
                    config={"displayModeBar": False})
    has_frames = servable(clip.path)  # frames only from files under the media roots/uploads
    if has_frames:
        viewer, gallery = st.columns([3, 2], gap="large")
        with viewer:
            _scrubber(result, clip, scrub_key, default)
        with gallery:
            _key_frames(result, clip)
    st.markdown(f"**Detections** ({len(result.detections)})")
    if result.detections:
        st.dataframe(detections_rows(result), hide_index=True, height=240, key=f"dets-{job_id}")
    else:
        st.caption("No boxes on any sampled frame.")
    cols = st.columns(3)
    _json_button(cols[0], result, clip, job_id)
    _csv_button(cols[1], result, clip, job_id)
    if has_frames:
        with cols[2]:
            _annotated_video(result, clip, job_id)


def _score_filter(result: Result, job_id: str) -> Result:
    """A minimum-score slider when the boxes carry scores (P(the box shows the target));
    the views below show the boxes at or above it."""
    scores = [d.score for d in result.detections if d.score is not None]
    if not scores:
        return result
    least = st.slider("Minimum box score", 0.0, 1.0, 0.0, 0.05, key=f"minscore-{job_id}",
                      help="Each box's score is the probability that its region shows the "
                           "target, checked by the model on the box's crop.")
    kept = tuple(d for d in result.detections if d.score is None or d.score >= least)
    if len(kept) < len(result.detections):
        st.caption(f"Showing {len(kept)} of {len(result.detections)} boxes "
                   f"(score ≥ {least:.2f}).")
    return replace(result, detections=kept)


def _first_hit(result: Result) -> int:
    """Scrubber start: the first sampled frame with a detection (else the first frame)."""
    hit = {d.frame_index for d in result.detections}
    for i, idx in enumerate(result.sampling.frame_indices):
        if idx in hit:
            return i
    return 0


def _scrubber(result: Result, clip: ClipSource, key: str, default: int) -> None:
    times = result.sampling.timestamps_s
    if not times:
        st.caption("No frames were sampled.")
        return
    if key not in st.session_state:
        st.session_state[key] = default
    pos = st.select_slider("Frame", options=list(range(len(times))), key=key,
                           format_func=lambda i: f"{times[i]:.2f} s",
                           help="Step through the sampled frames; boxes are drawn as found.")
    n = sum(1 for d in result.detections if d.frame_index == result.sampling.frame_indices[pos])
    image = _boxed_frame(result, clip, pos, VIEW_MAX_W)
    if image is not None:
        st.image(image, caption=f"t = {times[pos]:.2f} s · frame "
                 f"{result.sampling.frame_indices[pos]} · {n} box{'es' if n != 1 else ''}",
                 width="stretch")


def _key_frames(result: Result, clip: ClipSource) -> None:
    st.markdown("**Key frames**")
    picks = key_frame_positions(result, GALLERY_SIZE)
    if not picks:
        st.caption("No key frames: the target was not found.")
        return
    grid = st.columns(2)
    for n, pos in enumerate(picks):
        image = _boxed_frame(result, clip, pos, THUMB_MAX_W)
        if image is not None:
            grid[n % 2].image(image, caption=f"{result.sampling.timestamps_s[pos]:.2f} s",
                              width="stretch")


def key_frame_positions(result: Result, limit: int) -> list[int]:
    """Positions (into the sampled frames) of up to ``limit`` frames with detections,
    spread evenly over time and always including each segment's first hit."""
    index_pos = {idx: i for i, idx in enumerate(result.sampling.frame_indices)}
    hits = sorted({index_pos[d.frame_index] for d in result.detections
                   if d.frame_index in index_pos})
    if len(hits) <= limit:
        return hits
    firsts = []
    for seg in result.segments:
        pos = next((p for p in hits if result.sampling.timestamps_s[p] >= seg.start_s - 1e-6),
                   None)
        if pos is not None and pos not in firsts:
            firsts.append(pos)
    rest = [p for p in hits if p not in firsts]
    room = max(0, limit - len(firsts))
    step = len(rest) / room if room else 0
    chosen = firsts[:limit] + [rest[int(i * step)] for i in range(room)]
    return sorted(set(chosen))


@st.cache_data(show_spinner=False, max_entries=256)
def _read_frame(path: str, clip_key: str, frame_index: int, size_wh: tuple[int, int]
                ) -> np.ndarray:
    from chord_core.media.video import read_frames

    frames, _ = read_frames(path, [frame_index], size_wh=size_wh)
    return frames[0]


def _view_size(result: Result, max_w: int) -> tuple[int, int]:
    w, h = result.video.width, result.video.height
    if w <= max_w:
        return (w, h)
    return (max_w, max(2, round(h * max_w / w)))


def _boxed_frame(result: Result, clip: ClipSource, pos: int, max_w: int) -> np.ndarray | None:
    from chord_core.analysis.render import frame_with_boxes

    idx = result.sampling.frame_indices[pos]
    try:
        frame = _read_frame(clip.path, clip.key, idx, _view_size(result, max_w))
    except (ChordError, IndexError) as exc:
        log.warning("frame %d of %s could not be read: %s", idx, clip.path, exc)
        st.caption(f"Frame {idx} could not be read: {md_escape(exc)}")
        return None
    return frame_with_boxes(frame, result, result.sampling.timestamps_s[pos])


def _notes(result: Result) -> None:
    if result.warnings:
        with st.expander(f"Notes ({len(result.warnings)})", icon=":material/info:"):
            for w in result.warnings[:200]:
                st.markdown(f"- {md_escape(w)}")
    if result.task == "ground" and result.raw_outputs:  # a description IS its raw output
        with st.expander("Raw model output (per sampled frame)"):
            st.code("\n---\n".join(result.raw_outputs[:50]), language=None, wrap_lines=True)


# -- downloads --------------------------------------------------------------------------------

def _json_button(where: Any, result: Result, clip: ClipSource, job_id: str) -> None:
    doc = json.dumps(result.to_dict(), indent=2, ensure_ascii=False)
    where.download_button("Result JSON", doc, file_name=f"{Path(clip.name).stem}.chord.json",
                          mime="application/json", key=f"json-{job_id}", on_click="ignore",
                          icon=":material/data_object:", width="stretch")


def _csv_button(where: Any, result: Result, clip: ClipSource, job_id: str) -> None:
    from chord_core.analysis.render import detections_csv

    where.download_button("Detections CSV", detections_csv(result),
                          file_name=f"{Path(clip.name).stem}.detections.csv", mime="text/csv",
                          key=f"csv-{job_id}", on_click="ignore", icon=":material/table:",
                          width="stretch")


def _annotated_video(result: Result, clip: ClipSource, job_id: str) -> None:
    """Make the H.264 MP4 with boxes on demand, then offer it."""
    out = exports_dir() / f"{clip.key}-{job_id}.mp4"
    if out.exists():
        st.download_button("Annotated MP4", lambda: out.open("rb"),
                           file_name=f"{Path(clip.name).stem}.annotated.mp4",
                           mime="video/mp4", key=f"mp4-{job_id}", on_click="ignore",
                           icon=":material/movie:", width="stretch", type="primary")
        return
    if st.button("Make annotated MP4", key=f"make-mp4-{job_id}", icon=":material/movie_edit:",
                 width="stretch", help="Draws the boxes on every frame of the clip (H.264)."):
        _export(result, clip, out, job_id)
        st.rerun()
    err = st.session_state.get(f"export-error-{job_id}")
    if err:
        show_error(err)


def _export(result: Result, clip: ClipSource, out: Path, job_id: str) -> None:
    """Render into a temp file, then move it in place; errors are kept for the page."""
    from chord_core.analysis.render import export_annotated_video

    private_dir(out.parent)
    tmp = out.with_name(out.stem + ".part.mp4")
    bar = st.progress(0.0, text="Rendering annotated video…")

    def on_progress(done: int, total: int) -> None:
        if total > 0:
            bar.progress(min(1.0, done / total), text=f"Rendering frame {done}/{total}")

    try:
        export_annotated_video(clip.path, result, str(tmp), on_progress=on_progress)
    except ChordError as exc:
        log.warning("annotated export of %s failed: %s", clip.path, exc)
        st.session_state[f"export-error-{job_id}"] = exc.to_dict()
        tmp.unlink(missing_ok=True)
        return
    st.session_state.pop(f"export-error-{job_id}", None)
    os.chmod(tmp, 0o600)  # exports show the user's video: this user only
    os.replace(tmp, out)
