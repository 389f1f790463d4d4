"""Analyze on a long clip: chapters on the timeline, per-chunk progress, search, exports.

A clip longer than the long-video threshold (``CHORD_LONG_VIDEO_S``, 600 s) is not one
prompt: **Describe** makes chapters (``chord.chapters/v1``) and **Ground** grounds the whole
clip in chunks at 1 fps, as the CLI does. The run is many jobs on the app's shared workers,
driven in a background thread (``chord_ui.long_runs``); this page only starts it and polls
its progress (chunks done of total and the time left, from the run's row in the store).
The run is a parent job: its id is in the page's URL (``?job=``), so a reload, a second tab
or a shared link comes back to it running, or to its chapters and its last search once it
finished (from the store's parent row when the server was restarted meanwhile).

Finished chapters play in the in-page player with a chapters row on the timeline (a click
jumps to the chapter) and the ranges a search found highlighted; the chapters download as
JSON, WebVTT, SRT and Markdown. Model text is escaped everywhere (``md_escape``; the player
sets text with ``textContent``).
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_core.longvideo.eta import left_now
from chord_core.types import VideoInfo
from chord_ui import clip_view, resources
from chord_ui.formatting import human_duration, md_escape, test_model_label
from chord_ui.i18n import lang, t
from chord_ui.inputs import show_error
from chord_ui.uploads import ClipSource, servable

log = logging.getLogger(__name__)

POLL_S = 1.0
LONG_TASKS = ("describe", "ground")


def settings() -> Any:
    from chord_core.longvideo.settings import settings_from_env

    return settings_from_env()


def is_long(info: VideoInfo | None, task: str) -> bool:
    """Whether Run on this clip and task starts a long-video run."""
    if info is None or task not in LONG_TASKS or info.container == "image":
        return False
    try:
        return settings().is_long(info.duration_s)
    except ChordError as exc:  # a bad CHORD_LONG_VIDEO_S: said once in the log, clips stay short
        log.warning("long-video mode is off: %s", exc)
        return False


def run_key(clip: ClipSource, task: str, query: str, model: str) -> str:
    what = query.strip() if task == "ground" else ""
    digest = hashlib.sha256(f"{task}\0{model}\0{what}".encode()).hexdigest()[:12]
    return f"{clip.key}:{task}:{digest}"


def _in_flight() -> int:
    from chord_core.longvideo.settings import chunks_in_flight

    width = sum(max(1, spec.model_cfg.batch_size) for spec in resources.worker_plan().specs)
    return chunks_in_flight(width, settings().in_flight)


def parent_id(clip: ClipSource, task: str, query: str, model: str) -> str:
    """The run's parent job id (what ``?job=`` names): a content key of clip and settings."""
    if task == "ground":
        from chord_core.longvideo.ground import ground_run_id
        from chord_core.longvideo.settings import GROUND_LONG_TOKENS, ground_long_sampling

        return ground_run_id(clip.key, query, settings(), model, ground_long_sampling(),
                             GROUND_LONG_TOKENS)
    from chord_core.longvideo.chapters import chapters_run_id

    return chapters_run_id(clip.key, settings(), model)


def current_run(clip: ClipSource, task: str, query: str, model: str) -> dict[str, Any] | None:
    """This clip and task's run: the one this server runs or ran, else one the store has
    finished (a restart in between), filed again so the page shows it."""
    key = run_key(clip, task, query, model)
    snap = resources.long_runs().get(key)
    if snap is not None or not model:
        return snap
    run = parent_id(clip, task, query, model)
    row = _stored(run)
    if row is None or row["state"] != "done":
        return None
    doc = (row.get("summary") or {}).get("document")
    if not doc:
        return None
    if task == "ground":
        from chord_core.types import Result

        parsed: Any = Result.from_dict(doc)
    else:
        from chord_core.longvideo.doc import ChaptersDoc

        parsed = ChaptersDoc.from_dict(doc)
    return resources.long_runs().adopt(key, "ground" if task == "ground" else "chapters",
                                       run, parsed)


def _stored(job_id: str) -> dict[str, Any] | None:
    try:
        return resources.store().get_job(job_id)
    except ChordError as exc:
        log.info("parent row %s unreadable: %s", job_id, exc)
        return None


def shown_job(clip: ClipSource | None, task: str, query: str, model: str | None
              ) -> str | None:
    """The parent job the page shows for a long clip (for ``?job=``), or None."""
    if clip is None or not model:
        return None
    snap = current_run(clip, task, query, model)
    if snap is not None:
        return snap["run_id"] or None
    run = parent_id(clip, task, query, model)
    return run if _stored(run) is not None else None


def _start(clip: ClipSource, info: VideoInfo, task: str, query: str, model: str) -> None:
    from chord_core.analysis.request import AnalysisRequest
    from chord_ui import long_runs as lr

    if task == "ground":
        AnalysisRequest(clip.path, "ground", query)  # an empty target is refused here
    args = (resources.job_manager(), info, clip.key)
    work = lr.chapters_work(*args, settings(), model, _in_flight()) if task == "describe" \
        else lr.ground_work(*args, query.strip(), settings(), model, _in_flight())
    resources.long_runs().start(run_key(clip, task, query, model),
                                "chapters" if task == "describe" else "ground", work,
                                run_id=parent_id(clip, task, query, model))


def run_panel(clip: ClipSource, info: VideoInfo, task: str, query: str, model: str | None,
              model_ok: bool) -> None:
    """The right column's Run for a long clip: what will happen, Run, live progress."""
    s = settings()
    from chord_ui.wording import long_plan_words

    what = long_plan_words(s, info.duration_s, task, lang())
    st.info(t("**Long video** — {duration} is longer than {threshold}, so it is analysed in "
              "parts.", duration=human_duration(info.duration_s),
              threshold=human_duration(s.threshold_s)) + " " + what,
            icon=":material/view_timeline:")
    key = run_key(clip, task, query, model or "")
    snap = current_run(clip, task, query, model or "")
    running = snap is not None and snap["state"] == "running"
    if snap is None and model:
        _stopped_note(parent_id(clip, task, query, model))
    if st.button(t("Run"), type="primary", icon=":material/play_arrow:", key="run-long",
                 disabled=not model_ok or model is None or running):
        try:
            _start(clip, info, task, query, model or "")
        except ChordError as exc:
            show_error(exc)
        else:
            st.rerun()
    if running:
        progress(key)


def _stopped_note(run: str) -> None:
    """A run the store has unfinished that this server does not run (it stopped with a
    restart): how far it got, and that Run goes on from there."""
    row = _stored(run)
    if row is None or row["state"] == "done":
        return
    p = (row.get("summary") or {}).get("progress") or {}
    st.caption(":material/pause_circle: " + t(
        "A run of this clip stopped at {done}/{total} ({state}). Press **Run** to go on: "
        "finished chunks are kept.", done=int(p.get("done") or 0),
        total=int(p.get("total") or 0), state=t(row["state"])))


def progress(key: str, box: str = "long-progress") -> None:
    """Stage, chunks done of total, time left, Cancel — polled every second."""

    @st.fragment(run_every=POLL_S)
    def poll() -> None:
        runs = resources.long_runs()
        snap = runs.get(key)
        if snap is None or snap["state"] != "running":
            st.rerun()
        p = runs.progress(key) or {}
        done, total = int(p.get("done") or 0), int(p.get("total") or 0)
        with st.container(border=True, key=box):
            stage = _stage_name(str(p.get("stage") or ""))
            st.markdown(f"**{md_escape(stage)}**" + (f" · {done}/{total}" if total else ""))
            st.progress(done / total if total else 0.0)
            text = t("Elapsed {elapsed}", elapsed=human_duration(snap["elapsed_s"]))
            eta = left_now(p, time.time())  # counted down between chunks (longvideo/eta)
            text += " · " + (t("about {left} left", left=human_duration(eta))
                             if eta is not None else t("estimating the time left…"))
            st.caption(text)
            st.button(t("Cancel"), key=f"cancel-{key}", icon=":material/stop_circle:",
                      on_click=resources.long_runs().cancel, args=(key,))

    poll()


def _stage_name(stage: str) -> str:
    names = {"chunks": t("Describing chunks"), "chapters": t("Writing chapter titles"),
             "summary": t("Writing the summary"), "grounding": t("Grounding chunks"),
             "checking": t("Checking frames")}
    return names.get(stage, t("Starting"))


def show_results(clip: ClipSource, info: VideoInfo, task: str, query: str,
                 model: str | None) -> None:
    """The finished run of this clip and task: chapters, or the long grounding result."""
    snap = current_run(clip, task, query, model or "")
    if snap is None or snap["state"] == "running":
        return
    st.divider()
    if snap["state"] == "failed":
        show_error(snap["error"] or {"message": "the long-video run failed"})
        return
    if snap["state"] == "cancelled":
        st.info(t("Cancelled. Press **Run** to go on: finished chunks are kept."),
                icon=":material/stop_circle:")
        return
    if task == "ground":
        from chord_ui import results
        from chord_ui.session import Outcome

        results.show_outcome(Outcome(snap["run_id"] or snap["key"], "done", snap["doc"]), clip)
        return
    _chapters(clip, info, snap["doc"], snap["key"], model or "")


def _chapters(clip: ClipSource, info: VideoInfo, doc: Any, key: str, model: str) -> None:
    st.subheader(t("Chapters"))
    if doc.test_model:
        st.warning(t("**{label}** — this output is meaningless; it only shows that the "
                     "pipeline works.", label=t(test_model_label())), icon=":material/science:")
    _restore_search(key, doc)
    found = _search_doc(key)
    ranges = [{"start": h.start_s, "end": h.end_s, "label": f"{h.score:.2f}"}
              for h in (found.hits if found is not None else ())]
    chapters = [{"start": c.start_s, "end": c.end_s, "title": c.title} for c in doc.chapters]
    playable = clip_view.playable_path(clip, info) if servable(clip.path) else None
    if playable is not None:
        from chord_ui.player import show_long_player

        show_long_player(info, playable, key, chapters=chapters, ranges=ranges)
    st.markdown(md_escape(doc.summary) or t("(the model returned no text)"))
    for n, c in enumerate(doc.chapters, 1):
        with st.container(border=True):
            st.markdown(f"**{n}. {md_escape(c.title)}** · {_clock(c.start_s)}–{_clock(c.end_s)}")
            st.caption(md_escape(c.summary))
            _seek_button(key, c.start_s, f"ch-{n}", playable is not None)
    _search(clip, info, doc, key, model, found, playable is not None)
    _exports(clip, doc, key)


def _seek_button(key: str, at: float, name: str, seekable: bool) -> None:
    """A button that moves the player to ``at`` (only where there is a player)."""
    if seekable:
        from chord_ui.player import seek_to

        st.button(t("Play from {at}", at=_clock(at)), key=f"seek-{key}-{name}",
                  icon=":material/play_arrow:", type="tertiary", on_click=seek_to,
                  args=(key, at))


def span_text(start_s: float, end_s: float) -> str:
    """A found range as times: ``at 16:50`` for one moment (not "16:50–16:50"), else
    ``16:50 to 17:10``."""
    if _clock(start_s) == _clock(end_s):
        return t("at {at}", at=_clock(start_s))
    return t("{start} to {end}", start=_clock(start_s), end=_clock(end_s))


def _clock(t_s: float) -> str:
    h, rest = divmod(int(t_s), 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _search_key(key: str) -> str:
    return f"long-search-{key}"


def _query_key(query: str, key: str) -> str:
    return f"{key}:search:{hashlib.sha256(query.strip().encode()).hexdigest()[:12]}"


def _restore_search(key: str, doc: Any) -> None:
    """After a reload (or in a second tab, or after a restart) the chapters run's last
    search comes back: its parent row is a child of the chapters run in the store."""
    if st.session_state.get(_search_key(key)) or not doc.run_id:
        return
    try:
        rows = resources.store().list_jobs(limit=20, parent=doc.run_id)
    except ChordError as exc:
        log.info("searches of %s unreadable: %s", doc.run_id, exc)
        return
    row = next((r for r in rows if r["task"] == "search"), None)
    if row is None:
        return
    skey = _query_key(row["query"], key)
    document = (row.get("summary") or {}).get("document")
    if resources.long_runs().get(skey) is None and row["state"] == "done" and document:
        from chord_core.longvideo.doc import SearchDoc

        resources.long_runs().adopt(skey, "search", row["job_id"], SearchDoc.from_dict(document))
    st.session_state[_search_key(key)] = skey
    st.session_state.setdefault(f"search-q-{key}", row["query"])


def _search_doc(key: str) -> Any:
    current = st.session_state.get(_search_key(key))
    snap = resources.long_runs().get(current) if current else None
    return snap["doc"] if snap is not None and snap["state"] == "done" else None


def _search(clip: ClipSource, info: VideoInfo, doc: Any, key: str, model: str,
            found: Any, seekable: bool = False) -> None:
    from chord_ui import long_runs as lr

    st.markdown(t("**Search this video**"))
    with st.form(f"search-form-{key}", border=False):
        query = st.text_input(t("When does this happen?"), key=f"search-q-{key}",
                              placeholder=t("e.g. a person opens the car door"))
        go = st.form_submit_button(t("Search"), icon=":material/search:")
    if go and query.strip():
        skey = _query_key(query, key)
        st.session_state[_search_key(key)] = skey
        from chord_core.longvideo.search import search_run_id

        resources.long_runs().start(skey, "search", lr.search_work(
            resources.job_manager(), info, clip.key, doc, query.strip(),
            model, _in_flight()), run_id=search_run_id(clip.key, doc, query, model))
        st.rerun()
    current = st.session_state.get(_search_key(key))
    snap = resources.long_runs().get(current) if current else None
    if snap is not None and snap["state"] == "running":
        progress(current, "search-progress")
    elif snap is not None and snap["state"] == "failed":
        show_error(snap["error"] or {"message": "the search failed"})
    if found is not None:
        if not found.hits:
            st.caption(t("Not found in the chapters checked ({n} frames).",
                         n=found.frames_checked))
        for n, h in enumerate(found.hits):
            st.markdown(t("{span} · chapter {chapter} · score {score}",
                          span=span_text(h.start_s, h.end_s), chapter=h.chapter + 1,
                          score=f"{h.score:.2f}"))
            _seek_button(key, h.start_s, f"hit-{n}", seekable)


def _exports(clip: ClipSource, doc: Any, key: str) -> None:
    from chord_core.longvideo import exports

    stem = Path(clip.name).stem
    cols = st.columns(4)
    files = ((t("Chapters JSON"), exports.to_json, "chapters.json", "application/json"),
             ("WebVTT", exports.to_vtt, "chapters.vtt", "text/vtt"),
             ("SRT", exports.to_srt, "chapters.srt", "application/x-subrip"),
             ("Markdown", exports.to_markdown, "chapters.md", "text/markdown"))
    for col, (label, make, suffix, mime) in zip(cols, files):
        col.download_button(label, make(doc), file_name=f"{stem}.{suffix}", mime=mime,
                            key=f"export-{suffix}-{key}", on_click="ignore",
                            icon=":material/download:", width="stretch")
