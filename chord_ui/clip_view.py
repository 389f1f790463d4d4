"""The clip column: probe + sampling plan (cached, no model), preview player, probe facts.

Clips browsers cannot play (AVI, MKV, HEVC…) get an H.264 preview made once
(``chord_ui.previews``); without one, a poster frame stands in for the player.
"""

from __future__ import annotations

import logging
from dataclasses import astuple
from pathlib import Path

import streamlit as st

from chord_core.config import SamplingConfig
from chord_core.errors import ChordError, VideoError
from chord_core.types import SamplingPlan, VideoInfo
from chord_ui.formatting import human_bytes, md_escape, video_facts
from chord_ui.i18n import lang, t
from chord_ui.previews import (
    PREVIEW_MAX_S,
    drop_stale,
    failed_marker,
    make_preview,
    plays_in_browser,
    preview_file,
)
from chord_ui.uploads import ClipSource, servable, show_video
from chord_ui.wording import plan_numbers, plan_words

log = logging.getLogger(__name__)

PREVIEW_MAX_BYTES = 1 << 30
POSTER_W = 640


@st.cache_data(show_spinner=False, max_entries=128)
def _plan(path: str, clip_key: str, task: str, sampling: tuple) -> tuple[VideoInfo, SamplingPlan]:
    from chord_core.analysis.request import plan

    return plan(path, task, SamplingConfig(*sampling))


def probe_and_plan(clip: ClipSource, task: str, sampling: SamplingConfig
                   ) -> tuple[VideoInfo, SamplingPlan]:
    """Probe the clip and plan its sampling. Raises ChordError with a readable message,
    also for failures the probe did not foresee (a bad file must never crash the page).
    Messages name the user's file (``clip.name``), never the private upload copy."""
    try:
        return _plan(clip.path, clip.key, task, astuple(sampling))
    except ChordError as exc:
        raise user_named(exc, clip) from exc
    except Exception as exc:  # noqa: BLE001 — turned into a readable error for the page
        log.exception("probing %s failed", clip.path)
        raise VideoError(f"{clip.name} could not be read as a video ({type(exc).__name__}: "
                         f"{exc})", hint="check that the file is a complete video; re-encode "
                         "it with ffmpeg -i in.ext -c:v libx264 out.mp4 if needed") from exc


def user_named(exc: ChordError, clip: ClipSource) -> ChordError:
    """``exc`` with the upload's internal path or file name replaced by the user's name."""
    if not clip.uploaded:
        return exc
    internal = Path(clip.path)
    message, hint = exc.message, exc.hint
    for old in (str(internal), internal.name):
        message, hint = message.replace(old, clip.name), (hint or "").replace(old, clip.name)
    if (message, hint) == (exc.message, exc.hint or ""):
        return exc
    try:
        return type(exc)(message, hint=hint)
    except TypeError:  # a subclass with another signature: keep it as it is
        return exc


def playable_path(clip: ClipSource, info: VideoInfo | None) -> str | None:
    """A file of this clip the browser can play: the clip itself, or its H.264 preview
    (made now if missing, with a spinner); None when there can be none."""
    if not servable(clip.path):
        return None
    from chord_ui.player import undecodable

    if plays_in_browser(clip.path, info) and clip.path not in undecodable():
        return clip.path if Path(clip.path).stat().st_size <= PREVIEW_MAX_BYTES else None
    if clip.path in undecodable():
        st.caption(":material/info: " + t("This browser could not decode the file; playing a "
                                          "transcoded preview of it."))
    from chord_core.media.roots import job_roots

    out = preview_file(clip.key)
    if out.exists():
        return str(out)
    drop_stale(out)  # one made by an earlier Chord may place frames differently
    if (info is not None and info.duration_s > PREVIEW_MAX_S) or failed_marker(out).exists():
        return None  # a failed preview was logged once, when it failed
    try:
        with st.spinner(t("Making a browser-playable preview…")):
            make_preview(clip.path, out, info=info, roots=job_roots())
    except Exception as exc:  # noqa: BLE001 — a preview is a convenience: never fatal
        log.warning("no browser preview of %s: %s", clip.path, exc)
        return None
    return str(out)


POSTER_DARK = 24  # mean brightness (0–255) under which a candidate poster counts as black


def poster_indices(info: VideoInfo) -> list[int]:
    """Frames a poster may come from: the first, then 1, 3 and 10 s in (films fade in from
    black: Megamind.avi's first frame is black), all within the clip's frames."""
    fps = info.fps if info.fps > 0 else 25.0
    last = max(0, info.frame_count - 1)
    return sorted({min(last, round(s * fps)) for s in (0.0, 1.0, 3.0, 10.0)})


@st.cache_data(show_spinner=False, max_entries=64)
def _poster(path: str, clip_key: str, width: int, height: int, indices: tuple[int, ...]
            ):  # noqa: ANN202
    """The first candidate frame that is not (nearly) black, else the brightest one."""
    from chord_core.media.video import read_frames

    frames, _ = read_frames(path, list(indices), size_wh=(width, height))
    means = [float(f.mean()) for f in frames]
    bright = [k for k, m in enumerate(means) if m >= POSTER_DARK]
    return frames[bright[0] if bright else max(range(len(means)), key=means.__getitem__)]


def _show_poster(clip: ClipSource, info: VideoInfo) -> None:
    w = min(POSTER_W, info.width)
    h = max(2, round(info.height * w / max(1, info.width)))
    try:
        st.image(_poster(clip.path, clip.key, w, h, tuple(poster_indices(info))),
                 caption=t("A frame of the clip (no playable preview of this file)"),
                 width="stretch")
    except (ChordError, IndexError, OSError) as exc:
        log.warning("no poster for %s: %s", clip.path, exc)


def show_clip(clip: ClipSource, info: VideoInfo | None) -> None:
    """Preview player (the clip, or its H.264 preview) and the probe facts. The clip is
    confined to the media roots in this process: every read of it (poster, probe, player)
    opens it under them (``media.confined``)."""
    from chord_core.media.confined import confine
    from chord_core.media.roots import job_roots

    ok = servable(clip.path)  # nothing outside the media roots/uploads reaches /media
    if ok:
        confine(clip.path, job_roots())  # the poster's and the probe's reads too
    size = Path(clip.path).stat().st_size if ok else 0
    kind = t("uploaded") if clip.uploaded else t("local file")
    if info is None:
        st.caption(f"**{md_escape(clip.name)}** · {kind}")
        return
    playable = playable_path(clip, info) if ok else None
    if playable == clip.path:
        show_video(playable)
    elif playable is not None:
        st.video(playable)
        if playable != clip.path:
            st.caption(t("Browsers cannot play {ext} files: this is an H.264 preview made "
                         "for the page. Analysis reads the original.",
                         ext=Path(clip.path).suffix or "?"))
    elif ok:
        _show_poster(clip, info)
    st.caption(f"**{md_escape(clip.name)}** · {kind} · {human_bytes(size)}")
    st.markdown(" · ".join(f"{t(label)} **{md_escape(value)}**"
                           for label, value in video_facts(info)))  # codec names come from the file
    for warning in info.warnings:
        st.caption(f":material/warning: {md_escape(warning)}")


def show_plan(plan: SamplingPlan, info: VideoInfo | None) -> None:
    """The plan before running, in words; its numbers and notes behind a toggle."""
    duration = info.duration_s if info is not None else 0.0
    st.markdown(f":material/grid_view: **{t('Plan:')}** {plan_words(plan, duration, lang())}")
    if st.toggle(t("Show the numbers"), key="plan_numbers"):
        st.caption(plan_numbers(plan, lang()))
        for note in plan.notes:
            st.caption(md_escape(note))
