"""Batch page sections: choose many clips, queue them, follow them live, download results.

The batch runs on the shared job manager's workers (``resources.job_manager``); the page
keeps only a ``BatchRun`` in its session state and rereads the manager every second in a
fragment. When every clip has finished, one full rerun shows the final view with the ZIP.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import streamlit as st

from chord_core.errors import ChordError
from chord_core.media.roots import MAX_DEPTH, MAX_LISTED, roots_text
from chord_ui import model_panel, resources
from chord_ui.batch_jobs import (
    BatchRun,
    PendingClip,
    batch_metrics,
    batch_zip,
    cancel_all,
    clip_state,
    finished_at,
    folder_clips,
    recheck,
    submit_batch,
    summary,
    table_rows,
    worker_rows,
)
from chord_ui.formatting import human_bytes, human_duration, md_escape, root_example
from chord_ui.i18n import link_params, t
from chord_ui.inputs import Settings, release_uploads, show_error
from chord_ui.uploads import VIDEO_TYPES, save_upload

log = logging.getLogger(__name__)

K_UPLOADS, K_FOLDER, K_RUN, K_SUBMIT_ERROR = ("batch_uploads", "batch_folder", "batch_run",
                                              "batch_submit_error")
K_UPLOADS_GEN = "batch_uploads_gen"
POLL_S = 1.0
ANALYZE_PAGE = "views/analyze.py"
PREVIEW_ROWS = 8


def keep_model_choice() -> None:
    """Carry the model choice over from the Analyze page. The sidebar's model widgets get
    their first value from session state (``model_panel``); on a switch straight after that
    first run Streamlit would mount them here at their defaults (seen in Chromium: "Hub
    model" instead of the test model). Re-assigning the values makes them win again."""
    for key in (model_panel.K_SOURCE, model_panel.K_HUB, model_panel.K_LOCAL):
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


# -- choosing clips ------------------------------------------------------------------------

def clip_inputs() -> list[PendingClip]:
    """Multi-file uploader and a folder box; returns the clips chosen so far."""
    uploads = st.file_uploader(t("Upload videos"), type=list(VIDEO_TYPES),
                               accept_multiple_files=True, key=_uploads_key(),
                               help=t("Many files at once: mp4, avi, mov, mkv or webm"))
    folder = st.text_input(t("…and/or a folder on this machine"), key=K_FOLDER,
                           placeholder=root_example(),
                           help=t("Every video file in the folder and its subfolders is "
                                  "queued; the folder must be under the media roots "
                                  "(CHORD_MEDIA_ROOTS) on the machine running Chord: {roots}.",
                                  roots=roots_text()))
    clips = [PendingClip(u.name, "", "upload") for u in uploads or ()]
    if folder.strip():
        try:
            found, truncated = folder_clips(folder)
        except ChordError as exc:
            show_error(exc)
        else:
            clips += found
            if truncated:
                st.caption(":material/info: " + t(
                    "Only the first {n} videos are listed (at most {max}, {depth} folder "
                    "levels deep); choose a smaller folder for the rest.", n=len(found),
                    max=MAX_LISTED, depth=MAX_DEPTH))
    _preview(clips, uploads or ())
    return clips


def _uploads_key() -> str:
    """The uploader's key; a new one empties the uploader once its files are queued."""
    return f"{K_UPLOADS}-{st.session_state.get(K_UPLOADS_GEN, 0)}"


def _preview(clips: Sequence[PendingClip], uploads: Sequence[Any]) -> None:
    if not clips:
        st.caption(t("Add videos: upload them, or give a folder path for big local files."))
        return
    sizes = {u.name: u.size for u in uploads}
    total = sum(sizes.values())
    ready = t("**{n} clips** ready to queue" if len(clips) != 1 else "**{n} clip** ready to queue",
              n=len(clips))
    st.markdown(":material/video_library: " + ready
                + (" · " + t("{size} uploaded", size=human_bytes(total)) if total else ""))
    shown = ", ".join(md_escape(c.name) for c in clips[:PREVIEW_ROWS])
    more = len(clips) - PREVIEW_ROWS
    st.caption(shown + (t(" and {n} more", n=more) if more > 0 else ""))


def _saved_clips(clips: Sequence[PendingClip]) -> list[PendingClip]:
    """Uploaded clips streamed to the data dir (by content hash), then dropped from the
    server's memory and from the uploader; folder clips as they are."""
    uploads = {u.name: u for u in st.session_state.get(_uploads_key()) or ()}
    out = []
    for c in clips:
        if c.source == "upload":
            upload = uploads[c.name]
            saved = save_upload(upload.name, upload)
            out.append(PendingClip(c.name, saved.path, "upload"))
        else:
            out.append(c)
    if uploads:
        release_uploads(uploads.values())
        st.session_state[K_UPLOADS_GEN] = st.session_state.get(K_UPLOADS_GEN, 0) + 1
    return out


# -- submitting ----------------------------------------------------------------------------

def queue_button(clips: Sequence[PendingClip], task: str, query: str, settings: Settings,
                 model: str | None, model_ok: bool) -> None:
    """The Queue button; submits every clip as one batch."""
    running = _current() is not None and _current().finished_at is None
    label = (t("Queue {n} clips" if len(clips) != 1 else "Queue {n} clip", n=len(clips))
             if clips else t("Queue"))
    if not model_ok:
        st.caption(":material/info: " + t("Choose a model that is available (sidebar) to run."))
    if running:
        st.caption(":material/info: " + t("A batch is running; a new one queues behind it."))
    signature = _signature(clips, task, query, settings, model)
    queued = bool(clips) and st.session_state.get(K_QUEUED) == signature
    if queued:  # a folder stays listed after its run: a second click would queue it again
        st.caption(":material/check: " + t("These clips are queued already with these "
                                           "settings; change the clips or a setting to queue "
                                           "them again."))
    if st.button(label, type="primary", icon=":material/playlist_play:", key="batch_queue",
                 disabled=not clips or not model_ok or model is None or queued):
        kept, dropped = recheck(clips)
        try:
            run = submit_batch(_saved_clips(kept), task, query, settings.sampling(task),
                               settings.max_new_tokens, model or "", resources.job_manager())
        except ChordError as exc:
            st.session_state[K_SUBMIT_ERROR] = exc.to_dict()
        except OSError as exc:
            st.session_state[K_SUBMIT_ERROR] = {
                "message": f"could not save the uploads: {exc}",
                "hint": "check free disk space and that CHORD_DATA_DIR is writable"}
        else:
            st.session_state[K_SUBMIT_ERROR] = None if not dropped else {
                "message": f"left out {len(dropped)} clip(s) that are no longer regular video "
                           f"files under the media roots: {', '.join(dropped[:5])}",
                "hint": "check those files and queue them again"}
            st.session_state[K_RUN] = run
            st.session_state[K_QUEUED] = signature
        st.rerun()
    err = st.session_state.get(K_SUBMIT_ERROR)
    if err:
        show_error(err)


K_QUEUED = "batch_queued_signature"


def _signature(clips: Sequence[PendingClip], task: str, query: str, settings: Settings,
               model: str | None) -> str:
    """What a Queue click would submit: the same clips, mode, text, settings and model."""
    import hashlib

    what = repr((sorted(c.path for c in clips), task, query, model,
                 settings.sampling(task), settings.max_new_tokens))
    return hashlib.sha256(what.encode()).hexdigest()


def _current() -> BatchRun | None:
    return st.session_state.get(K_RUN)


# -- following -----------------------------------------------------------------------------

def show_current() -> None:
    """The latest batch of this session: live while it runs, results when it is done."""
    run = _current()
    if run is None:
        return
    st.divider()
    if run.finished_at is None:
        _live(run)
    else:
        _finished(run)


def _states(run: BatchRun) -> list[Any]:
    manager, store = resources.job_manager(), resources.store()
    return [clip_state(c, manager, store) for c in run.clips]


def _live(run: BatchRun) -> None:
    @st.fragment(run_every=POLL_S)
    def poll() -> None:
        states = _states(run)
        workers = resources.job_manager().workers()
        metrics = batch_metrics(run, states, workers)
        if metrics.finished:
            run.finished_at = finished_at(states)
            _save_summary(run, states)
            st.rerun()
        _header(run, metrics, live=True)
        if resources.job_manager().model_state().get("state") == "loading":
            st.caption(":material/hourglass_top: " + t(
                "The workers are loading the model; clips start as soon as it is ready."))
        _tables(states, workers, metrics)
        st.button(t("Cancel all"), key="batch_cancel", icon=":material/cancel:",
                  on_click=_cancel, args=(run,))

    poll()


def _cancel(run: BatchRun) -> None:
    n = cancel_all(run, resources.job_manager())
    log.info("batch %s: cancelled %d job(s)", run.batch_id, n)


def _finished(run: BatchRun) -> None:
    states = _states(run)
    workers = resources.job_manager().workers()
    metrics = batch_metrics(run, states, workers)
    _header(run, metrics, live=False)
    _tables(states, workers, metrics)
    _failures(states)
    manager, store = resources.job_manager(), resources.store()
    st.download_button(t("Download results (ZIP)"),
                       lambda: batch_zip(run, states, metrics, manager, store),
                       file_name=f"chord-{run.batch_id}.zip", mime="application/zip",
                       key=f"zip-{run.batch_id}", on_click="ignore", type="primary",
                       icon=":material/folder_zip:",
                       help=t("One chord.result/v1 JSON per clip that has a result, plus "
                              "summary.json (states, workers, busy time, speed-up)."))


def _save_summary(run: BatchRun, states: Sequence[Any]) -> None:
    """The final summary (busy time, speed-up, throughput) on the batch's parent row,
    written through the manager (``manager.parents``; a store that fails is logged there)."""
    metrics = batch_metrics(run, states, resources.job_manager().workers())
    doc = summary(run, states, metrics, {})
    doc["progress"] = {"stage": "clips", "done": metrics.total, "total": metrics.total}
    resources.job_manager().parents.summarise(run.batch_id, doc)


def _header(run: BatchRun, metrics: Any, *, live: bool) -> None:
    what = t("Describe") if run.task == "describe" else t("Ground “{query}”",
                                                          query=md_escape(run.query))
    st.subheader(t("Batch") + f" · {what}")
    st.caption(t("{id} · model {model} · {n} clips", id=f"`{run.batch_id}`",
                 model=md_escape(run.model), n=metrics.total))
    c = metrics.counts
    done, failed, skipped = c.get("done", 0), c.get("failed", 0), c.get("skipped", 0)
    finished = done + failed + skipped + c.get("cancelled", 0)
    cols = st.columns(5)
    cols[0].metric(t("Analysed"), f"{done} / {metrics.total}",
                   help=t("Clips of this batch analysed now, of all its clips (failed and "
                          "skipped ones are counted beside it; all finished ones in the bar "
                          "below)."))
    cols[1].metric(t("Failed"), failed)
    cols[2].metric(t("Skipped"), skipped, help=t("Already analysed with the same settings: "
                                                 "the stored result is reused."))
    cols[3].metric(t("Throughput"), t("{n}/min", n=f"{metrics.per_min:.1f}"),
                   help=t("Clips analysed per minute since the batch began."))
    cols[4].metric(t("Speed-up"), speedup_text(metrics) if done else "—",
                   help=t("Σ worker busy time / wall time since the batch began: how many "
                          "workers were kept busy on average (shown once a clip is done)."))
    frac = finished / metrics.total if metrics.total else 1.0
    took = (t("{finished} of {total} clips finished · running for {time}") if live
            else t("{finished} of {total} clips finished · took {time}"))
    st.progress(frac, text=took.format(finished=finished, total=metrics.total,
                                       time=human_duration(metrics.wall_s)))


def speedup_text(metrics: Any) -> str:
    """The speed-up as the page shows it. On one worker there is nothing to speed up, and a
    figure such as ×0.97 (the worker idle between clips) read as a slow-down: it says "one
    worker" instead; below ×1.05 it says "none"."""
    ran = sum(1 for busy in metrics.busy_s.values() if busy > 0)
    if ran <= 1:
        return t("one worker")
    if metrics.speedup < 1.05:
        return t("none")
    return f"×{metrics.speedup:.2f}"


def _tables(states: Sequence[Any], workers: Sequence[dict[str, Any]], metrics: Any) -> None:
    rows = table_rows(states)
    # the table's toolbar (search, download, fullscreen) floats above its top edge: a space
    # keeps it off the progress bar's text above
    st.space("small")
    event = st.dataframe(rows, hide_index=True, key="batch_table", on_select="rerun",
                         selection_mode="single-row", column_config={
        **{k: t(k) for k in ("state", "worker", "stage", "elapsed")},
        "progress": st.column_config.ProgressColumn(t("progress"), min_value=0, max_value=100,
                                                    format="%.0f %%"),
        "clip": st.column_config.TextColumn(t("clip"), width="large"),
    })
    _open_link(states, [i for i in event.selection.rows if 0 <= i < len(states)])
    st.markdown("**" + t("Workers") + "**")
    st.dataframe(worker_rows(states, workers, metrics), hide_index=True, key="batch_workers")


def _open_link(states: Sequence[Any], picked: list[int]) -> None:
    """A selected clip with a result opens in Analyze by its own job (``?job=``)."""
    if not picked:
        st.caption(":material/touch_app: " + t("Select a finished clip to open its result "
                                                "in Analyze."))
        return
    s = states[picked[0]]
    if s.state not in ("done", "skipped") or not s.clip.job_id:
        st.caption(t("This clip has no result yet ({state}).", state=t(s.state)))
        return
    st.page_link(ANALYZE_PAGE, label=t("Open {name} in Analyze", name=md_escape(s.clip.name)),
                 icon=":material/open_in_new:", query_params=link_params(job=s.clip.job_id))


def _failures(states: Sequence[Any]) -> None:
    failed = [s for s in states if s.state == "failed"]
    if not failed:
        return
    st.markdown("**" + t("Failed clips") + f"** ({len(failed)})")
    for s in failed:
        err = dict(s.error or {"message": "the analysis failed"})
        message = str(err.get("message") or "failed")
        if Path(s.clip.name).name not in message:
            err["message"] = f"{s.clip.name}: {message}"  # show_error escapes it
        show_error(err)
