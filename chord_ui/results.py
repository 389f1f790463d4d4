"""Rendering a finished analysis: description text, or the grounding views, plus downloads.

Everything shown comes from the ``chord.result/v1`` Result. Grounding results play in the
in-page player (``chord_ui.player``: boxes drawn in the browser, a clickable timeline); key
frames are re-read from the clip on demand (cached) with boxes drawn by
``chord_core.analysis.render``. The annotated MP4 renders in a background thread
(``chord_ui.renders``), so a second click or a rerun never restarts it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from chord_core.errors import ChordError
from chord_core.types import Result
from chord_ui import case_add, clip_view, entail_view, resources, scroll
from chord_ui.figures import timeline_figure
from chord_ui.formatting import (
    detections_rows,
    human_duration,
    md_escape,
    test_model_label,
)
from chord_ui.i18n import lang, t
from chord_ui.inputs import show_error
from chord_ui.messages import localized_note
from chord_ui.player import seek_on_select, seek_to, show_player
from chord_ui.uploads import ClipSource, exports_dir, servable
from chord_ui.wording import ground_summary, grouped_notes, plan_numbers

if TYPE_CHECKING:
    import numpy as np

    from chord_ui.session import Outcome

log = logging.getLogger(__name__)

VIEW_MAX_W = 960
THUMB_MAX_W = 360
GALLERY_SIZE = 8


def show_outcome(outcome: Outcome, clip: ClipSource) -> None:
    """Results, or a plain message for failed/cancelled jobs. The view is scrolled into
    sight once when it first appears in this tab (a run that just finished, a reload)."""
    scroll.scroll_here(outcome.job_id)
    if outcome.state == "failed":
        show_error(outcome.error or {"message": "the analysis failed"})
        return
    if outcome.state == "cancelled":
        st.info(t("Cancelled after {elapsed}. Press **Run** to start again.",
                  elapsed=human_duration(outcome.elapsed_s)), icon=":material/stop_circle:")
        if outcome.result is None:
            return
        if outcome.result.partial:
            st.warning(t("**Partial result** — only the frames finished before Cancel are "
                         "in it."), icon=":material/incomplete_circle:")
    result = outcome.result
    if result is None:
        return
    if not servable(clip.path):
        st.warning(t("The video file at {path} is gone or outside the media roots, so its "
                     "frames cannot be shown. Everything below comes from the stored result.",
                     path=md_escape(clip.path)), icon=":material/hide_image:")
    if result.task == "ground":
        _grounding(result, clip, outcome.job_id)
    elif result.task == "entail":
        entail_view.show(result, clip, outcome.job_id)
    else:
        _description(result, clip, outcome.job_id)
    case_add.result_control(result, outcome.job_id)
    _notes(result)


def _meta_caption(result: Result) -> None:
    model = md_escape(result.model.id) + (f" · {t(test_model_label())}"
                                          if result.model.test_model else "")
    st.caption(t("{model} · {plan} · {total} total{method}", model=model,
                 plan=plan_numbers(result.sampling, lang()),
                 total=human_duration(result.timing.total_s), method=_method_note(result)))


def _method_note(result: Result) -> str:
    """Two-pass grounding: how many frames were grounded, inside which spans."""
    if result.method != "two_pass" or result.grounded_frames is None:
        return ""
    spans = ", ".join(f"{a:.1f}–{b:.1f} s" for a, b in result.spans[:6]) or t("none")
    return t(" · two-pass: {n} of {total} frames grounded (spans {spans})",
             n=len(result.grounded_frames), total=result.sampling.num_frames, spans=spans)


def _test_badge(result: Result) -> None:
    if result.model.test_model:
        st.warning(t("**{label}** — this output is meaningless; it only shows that the "
                     "pipeline works.", label=t(test_model_label())), icon=":material/science:")


# -- describe ---------------------------------------------------------------------------------

def _description(result: Result, clip: ClipSource, job_id: str) -> None:
    st.subheader(t("Description"))
    _test_badge(result)
    text = result.text.strip() or t("(the model returned no text)")
    with st.container(border=True):
        st.markdown(md_escape(text))  # model text is shown as written, never rendered
    with st.expander(t("Plain text (copy)"), icon=":material/content_copy:"):
        st.code(text, language=None, wrap_lines=True)
    _meta_caption(result)
    cols = st.columns(3)
    _json_button(cols[0], result, clip, job_id)
    cols[1].download_button(t("Text (.txt)"), text, file_name=f"{Path(clip.name).stem}.txt",
                            mime="text/plain", key=f"txt-{job_id}", on_click="ignore",
                            icon=":material/description:", width="stretch")


# -- ground -----------------------------------------------------------------------------------

def _grounding(result: Result, clip: ClipSource, job_id: str) -> None:
    st.subheader(md_escape(ground_summary(result, lang())))
    _test_badge(result)
    _meta_caption(result)
    result = _score_filter(result, job_id)
    playable = clip_view.playable_path(clip, result.video) if servable(clip.path) else None
    has_frames = servable(clip.path)  # frames only from files under the media roots/uploads
    if playable is not None:
        viewer, gallery = st.columns([3, 2], gap="large")
        with viewer:
            show_player(result, playable, job_id, start_s=_first_hit_s(result))
        with gallery:
            _key_frames(result, clip, job_id)
    else:
        st.plotly_chart(timeline_figure(result), key=f"timeline-{job_id}",
                        config={"displayModeBar": False})
        if has_frames:
            _key_frames(result, clip, None)
    st.markdown(t("**Detections** ({n})", n=len(result.detections)))
    if result.detections:
        _detections_table(result, job_id, seekable=playable is not None)
    else:
        st.caption(t("No boxes on any sampled frame."))
    cols = st.columns(3)
    _json_button(cols[0], result, clip, job_id)
    _csv_button(cols[1], result, clip, job_id)
    if has_frames:
        with cols[2]:
            _annotated_video(result, clip, job_id)
        if result.detections:  # the sampled frames and their boxes, for annotation tools
            from chord_ui.dataset_downloads import dataset_buttons

            dataset_buttons(cols[1], result, clip, job_id)


def _score_filter(result: Result, job_id: str) -> Result:
    """A minimum-score slider when the boxes carry scores (P(the box shows the target));
    the views below show the boxes at or above it."""
    scores = [d.score for d in result.detections if d.score is not None]
    if not scores:
        return result
    least = st.slider(t("Minimum box score"), 0.0, 1.0, 0.0, 0.05, key=f"minscore-{job_id}",
                      help=t("Each box's score is the probability that its region shows the "
                             "target, checked by the model on the box's crop."))
    kept = tuple(d for d in result.detections if d.score is None or d.score >= least)
    if len(kept) < len(result.detections):
        st.caption(t("Showing {n} of {total} boxes (score ≥ {least}).", n=len(kept),
                     total=len(result.detections), least=f"{least:.2f}"))
    return replace(result, detections=kept)


def _first_hit_s(result: Result) -> float:
    """Where the player starts: the first detection's time (else the clip's start)."""
    return min((d.t_s for d in result.detections), default=0.0)


def _detections_table(result: Result, job_id: str, seekable: bool) -> None:
    """The detections; with a player, selecting a row moves the player to its frame."""
    key = f"dets-{job_id}"
    if not seekable:
        st.dataframe(detections_rows(result), hide_index=True, height=240, key=key)
        return
    st.caption(t("Select a row to see its frame in the player."))
    times = [d.t_s for d in result.detections]
    st.dataframe(detections_rows(result), hide_index=True, height=240, key=key,
                 on_select=lambda: seek_on_select(job_id, key, times),
                 selection_mode="single-row")


def _key_frames(result: Result, clip: ClipSource, job_id: str | None) -> None:
    """Thumbnails of frames with boxes; with a player (``job_id``), each has a button that
    moves the player there."""
    st.markdown(t("**Key frames**"))
    picks = key_frame_positions(result, GALLERY_SIZE)
    if not picks:
        st.caption(t("No key frames: the target was not found."))
        return
    grid = st.columns(2)
    for n, pos in enumerate(picks):
        image = _boxed_frame(result, clip, pos, THUMB_MAX_W)
        at = result.sampling.timestamps_s[pos]
        if image is None:
            continue
        with grid[n % 2]:
            st.image(image, width="stretch")
            if job_id is None:
                st.caption(f"{at:.2f} s")
            else:
                st.button(f"{at:.2f} s", key=f"kf-{job_id}-{pos}", icon=":material/play_arrow:",
                          on_click=seek_to, args=(job_id, at), type="tertiary",
                          help=t("Show this moment in the player"))


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
        st.caption(t("Frame {idx} could not be read: {why}", idx=idx, why=md_escape(exc)))
        return None
    return frame_with_boxes(frame, result, result.sampling.timestamps_s[pos])


# Grounding answers are capped per frame (chord_core's GROUND_MAX_NEW_TOKENS) whatever the
# "Max generation length" slider says, so "raise max new tokens" is advice nobody can follow.
_CUT_ADVICE = "(raise max new tokens)"


def _note_text(note: str, task: str) -> str:
    if task == "ground" and _CUT_ADVICE in note:
        return note.replace(_CUT_ADVICE, "(each frame's answer has a fixed length limit)")
    return note


def _notes(result: Result) -> None:
    if result.warnings:
        groups = grouped_notes([_note_text(w, result.task) for w in result.warnings])
        with st.expander(t("Notes ({n})", n=len(result.warnings)), icon=":material/info:"):
            for first, n in groups[:100]:
                more = t(" (and {n} more like it)", n=n - 1) if n > 1 else ""
                st.markdown(f"- {md_escape(localized_note(first))}{more}")
    if any(result.reasoning):  # a Thinking model: what it reasoned, folded (issue 31)
        with st.expander(t("Model reasoning (Thinking model)"), icon=":material/psychology:"):
            st.code("\n---\n".join(r for r in result.reasoning[:50] if r), language=None,
                    wrap_lines=True)
    if result.task == "ground" and result.raw_outputs:  # a description IS its raw output
        with st.expander(t("Raw model output (per sampled frame)")):
            st.code("\n---\n".join(result.raw_outputs[:50]), language=None, wrap_lines=True)


# -- downloads --------------------------------------------------------------------------------

def export_doc(result: Result, clip_name: str) -> dict[str, Any]:
    """The result JSON as downloaded: ``chord.result/v1`` with the user's own file name in
    ``video.name`` (``video.path`` is where Chord read it, e.g. the private upload copy)."""
    doc = result.to_dict()
    doc["video"] = {**doc["video"], "name": clip_name}
    return doc


def _json_button(where: Any, result: Result, clip: ClipSource, job_id: str) -> None:
    doc = json.dumps(export_doc(result, clip.name), indent=2, ensure_ascii=False)
    where.download_button(t("Result JSON"), doc, file_name=f"{Path(clip.name).stem}.chord.json",
                          mime="application/json", key=f"json-{job_id}", on_click="ignore",
                          icon=":material/data_object:", width="stretch")


def _csv_button(where: Any, result: Result, clip: ClipSource, job_id: str) -> None:
    from chord_core.analysis.render import detections_csv

    where.download_button(t("Detections CSV"), detections_csv(result),
                          file_name=f"{Path(clip.name).stem}.detections.csv", mime="text/csv",
                          key=f"csv-{job_id}", on_click="ignore", icon=":material/table:",
                          width="stretch")


def _start_render(clip_path: str, result: Result, out: Path) -> None:
    resources.renders().start(clip_path, result, out)


def _annotated_video(result: Result, clip: ClipSource, job_id: str) -> None:
    """Make the H.264 MP4 with boxes on demand (in a background thread), then offer it.
    While it renders the button is disabled and a fragment shows its progress."""
    out = exports_dir() / f"{clip.key}-{job_id}.mp4"
    if out.exists():
        st.download_button(t("Annotated MP4"), lambda: out.open("rb"),
                           file_name=f"{Path(clip.name).stem}.annotated.mp4",
                           mime="video/mp4", key=f"mp4-{job_id}", on_click="ignore",
                           icon=":material/movie:", width="stretch", type="primary")
        return
    state = resources.renders().get(out)
    running = state is not None and state["state"] == "running"
    st.button(t("Make annotated MP4"), key=f"make-mp4-{job_id}", icon=":material/movie_edit:",
              width="stretch", disabled=running, on_click=_start_render,
              args=(clip.path, result, out),
              help=t("Draws the boxes on every frame of the clip (H.264)."))
    if running:
        _render_progress(out)
    elif state is not None and state["state"] == "failed" and state["error"]:
        show_error(state["error"])


def _render_progress(out: Path) -> None:
    @st.fragment(run_every=0.5)
    def poll() -> None:
        state = resources.renders().get(out) or {}
        if state.get("state") != "running":
            st.rerun()
        done, total = state.get("done", 0), state.get("total", 0)
        st.progress(min(1.0, done / total) if total else 0.0,
                    text=t("Rendering frame {done}/{total}", done=done, total=total or "…"))

    poll()
