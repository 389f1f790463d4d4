"""Analyze-page inputs: generation and sampling settings (sidebar), the clip, the task.

The current clip lives in ``st.session_state`` (not only in the uploader widget), so it and
its results survive page switches and reruns. It is set by the uploader's and the path
box's ``on_change`` callbacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import streamlit as st
from streamlit.runtime.uploaded_file_manager import DeletedFile

from chord_core.config import (
    MAX_FRAMES_DEFAULT,
    MAX_NEW_TOKENS_DEFAULT,
    MAX_NEW_TOKENS_RANGE,
    MIN_FRAMES,
    MIN_PIXELS_DEFAULT,
    PATCH_PX,
    TOKEN_BUDGET_DEFAULT,
    SamplingConfig,
)
from chord_core.errors import ChordError, InputError
from chord_ui import model_panel
from chord_ui.formatting import md_escape, root_example, sentence_start
from chord_ui.i18n import choice_key, t
from chord_ui.uploads import (
    VIDEO_TYPES,
    ClipSource,
    discard_upload,
    local_source,
    save_upload,
)

log = logging.getLogger(__name__)


K_CLIP, K_CLIP_ERROR = "clip", "clip_error"
K_UPLOAD, K_PATH, K_UPLOAD_GEN = "upload", "local_path", "upload_gen"
K_TASK, K_PROMPT, K_TARGET = "task", "describe_prompt", "ground_target"
K_STATEMENT, K_SCORES = "entail_statement", "ground_scores"
TASKS = {"describe": "Describe", "ground": "Ground a target", "entail": "Check a statement"}
K_EXAMPLE = "example_clip"
TOKENS_PER_FRAME = ("auto", 256, 384, 512, 768, 1024, 1280, 1600)
PERSIST = "session"


@dataclass(frozen=True)
class Settings:
    """Sidebar choices that shape a run (the model is chosen separately)."""

    max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT
    fps: float | None = None
    max_frames: int = MAX_FRAMES_DEFAULT
    tokens_per_frame: int | None = None
    token_budget: int = TOKEN_BUDGET_DEFAULT

    def sampling(self, task: str) -> SamplingConfig:
        """The SamplingConfig for ``task``; the per-frame cap applies to that task's limit."""
        cfg = SamplingConfig(fps=self.fps, max_frames=self.max_frames,
                             token_budget=self.token_budget)
        if self.tokens_per_frame is None:
            return cfg
        pixels = self.tokens_per_frame * PATCH_PX * PATCH_PX
        if task == "ground":
            return SamplingConfig(fps=self.fps, max_frames=self.max_frames,
                                  token_budget=self.token_budget, ground_max_pixels=pixels)
        return SamplingConfig(fps=self.fps, max_frames=self.max_frames,
                              token_budget=self.token_budget, max_pixels=pixels,
                              min_pixels=min(MIN_PIXELS_DEFAULT, pixels))


def run_sidebar() -> tuple[str | None, bool, Settings, Any]:
    """The sidebar of the pages that run analyses: the model choice and its status, then the
    settings. Returns (model, whether it can run, settings, the slot for the plan)."""
    with st.sidebar:
        model = model_panel.model_selector()
        model_ok = model_panel.model_panel(model)
        st.divider()
        settings, plan_slot = settings_sidebar()
    return model, model_ok, settings, plan_slot


def settings_sidebar() -> tuple[Settings, Any]:
    """Generation length and the advanced sampling section (rendered in the sidebar).
    Returns the settings and an empty slot under them where the page writes the plan."""
    lo, hi = MAX_NEW_TOKENS_RANGE
    max_new = st.slider(t("Max generation length"), lo, hi, MAX_NEW_TOKENS_DEFAULT, step=64,
                        key="max_new_tokens", persist_state=PERSIST,
                        help=t("Upper bound on tokens the model writes for a description "
                               "(grounding answers have their own fixed per-frame limit)."))
    with st.expander(t("Advanced sampling"), icon=":material/tune:"):
        auto = st.toggle(t("Automatic frame rate"), value=True, key="fps_auto",
                         persist_state=PERSIST,
                         help=t("Auto: the task's default (2 fps for grounding, adaptive for "
                                "descriptions), lowered to fit the limits below."))
        fps = None if auto else st.number_input(
            t("Sampling fps"), 0.1, 30.0, 2.0, step=0.5, key="fps", persist_state=PERSIST)
        max_frames = st.number_input(t("Max frames"), MIN_FRAMES, MAX_FRAMES_DEFAULT,
                                     MAX_FRAMES_DEFAULT, step=4, key="max_frames",
                                     persist_state=PERSIST)
        per_frame = st.select_slider(
            t("Max resolution (visual tokens per frame)"), TOKENS_PER_FRAME, value="auto",
            key=choice_key("tokens_per_frame"), persist_state=PERSIST,
            format_func=lambda v: t("auto") if v == "auto" else str(v),
            help=t("One visual token covers 28×28 px. 768 ≈ 0.6 MP; auto uses the task's "
                   "default (768 to describe, 1280 to ground)."))
        budget = st.slider(t("Visual-token budget per request"), 2_000, 64_000,
                           TOKEN_BUDGET_DEFAULT, step=1_000, key="token_budget",
                           persist_state=PERSIST,
                           help=t("Qwen advises keeping a clip under ~24k visual tokens."))
        slot = st.empty()
    return Settings(max_new_tokens=int(max_new), fps=None if fps is None else float(fps),
                    max_frames=int(max_frames),
                    tokens_per_frame=None if per_frame == "auto" else int(per_frame),
                    token_budget=int(budget)), slot


# -- the clip ---------------------------------------------------------------------------------

def _upload_key() -> str:
    """The uploader's key: a new one after each upload gives an empty uploader, so neither
    Streamlit nor the widget's state keeps the uploaded bytes in memory once they are saved
    (the clip itself lives on in ``K_CLIP``)."""
    return f"{K_UPLOAD}-{st.session_state.get(K_UPLOAD_GEN, 0)}"


def _on_upload(key: str) -> None:
    """The uploader ``key`` changed. Read that widget, not the uploader of the current key:
    an uploader's change can arrive after its upload was saved and the key moved on. A rerun
    asked while the upload's own rerun was still running (the mode chosen at once) carries
    the old uploader again, with the file this callback saved and released; Streamlit reads
    it back as a ``DeletedFile`` (its id only). Reading the new, empty uploader instead
    forgot the clip just uploaded (Run stayed off); reading the old one without this check
    failed on the ``DeletedFile``'s missing name (the page showed Streamlit's error). Neither
    an empty uploader nor a released file is the user removing the clip (each uploader is
    emptied once its file is saved; the Remove button removes the clip): they change
    nothing."""
    upload = st.session_state.get(key)
    if upload is None or isinstance(upload, DeletedFile):
        return
    st.session_state[K_CLIP_ERROR] = None
    st.session_state[K_PATH] = ""  # the upload is the clip now: no old path (or its error)
    try:
        st.session_state[K_CLIP] = save_upload(upload.name, upload)
    except OSError as exc:
        st.session_state[K_CLIP_ERROR] = {
            "message": f"could not save the upload: {exc.strerror or exc}",
            "hint": "check free disk space and that CHORD_DATA_DIR is writable"}
    release_uploads([upload])
    st.session_state[K_UPLOAD_GEN] = st.session_state.get(K_UPLOAD_GEN, 0) + 1


def _on_path() -> None:
    """A typed path replaces the clip; one that cannot be used clears it (so Run is off
    and no result of the old clip stays under a message about the new one)."""
    text = (st.session_state.get(K_PATH) or "").strip()
    st.session_state[K_CLIP_ERROR] = None
    if not text:
        return
    try:
        st.session_state[K_CLIP] = local_source(text)
    except InputError as exc:
        st.session_state[K_CLIP] = None
        st.session_state[K_CLIP_ERROR] = exc.to_dict()


def _clear_clip() -> None:
    st.session_state[K_CLIP] = None
    st.session_state[K_CLIP_ERROR] = None
    st.session_state[K_PATH] = ""


def _on_example() -> None:
    from chord_ui.example_clip import example_clip

    st.session_state[K_CLIP_ERROR] = None
    try:
        clip, target = example_clip()
    except (OSError, ChordError) as exc:
        st.session_state[K_CLIP_ERROR] = {"message": f"could not make the example clip: {exc}",
                                          "hint": "check that CHORD_DATA_DIR is writable"}
        return
    st.session_state[K_CLIP] = clip
    st.session_state.setdefault(K_TARGET, target)
    if not st.session_state.get(K_TARGET):
        st.session_state[K_TARGET] = target


def release_uploads(uploads: Any) -> None:
    """Drop Streamlit's in-memory copy of uploads already saved to disk, so a 2 GB upload
    does not stay in the server's memory for as long as the widget shows it."""
    try:
        from streamlit.runtime import Runtime
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        ctx = get_script_run_ctx()
        if ctx is None or not Runtime.exists():
            return
        manager = Runtime.instance().uploaded_file_mgr
        for upload in uploads:
            manager.remove_file(ctx.session_id, upload.file_id)
    except (AttributeError, RuntimeError, KeyError) as exc:  # an older/newer Streamlit
        log.warning("could not release uploaded files from memory: %s", exc)


def refuse_clip(clip: ClipSource, err: ChordError) -> None:
    """The probe refused the current clip: forget it (Run turns off), keep its error as the
    page's one clip message, and delete the file when it was an upload (refused uploads are
    not kept)."""
    if clip.uploaded:
        discard_upload(clip)
    st.session_state[K_CLIP] = None
    st.session_state[K_CLIP_ERROR] = err.to_dict()


def clip_input() -> ClipSource | None:
    """Uploader + local path box; returns the current clip (or None)."""
    key = _upload_key()
    st.file_uploader(t("Upload a video"), type=list(VIDEO_TYPES), key=key,
                     on_change=_on_upload, args=(key,), help=t("mp4, avi, mov, mkv or webm"))
    st.text_input(t("…or the path of a video on this machine"), key=K_PATH,
                  on_change=_on_path, placeholder=root_example("clip.mp4"),
                  help=t("Big local files need no upload; the path must exist on the machine "
                         "running Chord."))
    clip = st.session_state.get(K_CLIP)
    if clip is None:
        st.button(t("Try an example clip"), key="example", icon=":material/auto_awesome:",
                  on_click=_on_example,
                  help=t("A short synthetic clip made on this machine (nothing is "
                         "downloaded): a red ball and a blue square moving."))
    else:
        left, right = st.columns([3, 1], vertical_alignment="center")
        left.markdown(f":material/movie: {t('Current clip:')} **{md_escape(clip.name)}**")
        right.button(t("Remove"), key="clear_clip", on_click=_clear_clip,
                     icon=":material/close:", width="stretch")
    err = st.session_state.get(K_CLIP_ERROR)
    if err:
        show_error(err)
    return clip


def task_input(prefix: str = "") -> tuple[str, str]:
    """Mode (describe / ground) and its text; returns (task, query). ``prefix`` gives a page
    its own widgets (Batch: ``batch_``), so it does not silently inherit Analyze's mode and
    target."""
    # No default= here: History's "Open in Analyze" and a job link set the mode through
    # Session State, and a widget given both warns on every use.
    if st.session_state.get(prefix + K_TASK) not in TASKS:
        st.session_state[prefix + K_TASK] = "describe"
    task = st.segmented_control(t("Mode"), list(TASKS), format_func=lambda k: t(TASKS[k]),
                                key=choice_key(prefix + K_TASK), persist_state=PERSIST,
                                required=True) or "describe"
    if task == "ground":
        query = st.text_input(t("Target"), key=prefix + K_TARGET, persist_state=PERSIST,
                              placeholder=t("e.g. the cyclist in a red helmet"),
                              help=t("Chord looks for it on every sampled frame, then links "
                                     "the boxes into tracks and time segments."))
        st.checkbox(t("Score each box"), key=prefix + K_SCORES, persist_state=PERSIST,
                    help=t("The probability that the box shows the target, checked by the "
                           "model on the box's crop; lets you filter weak boxes. Slower."))
    elif task == "entail":
        query = st.text_input(t("Statement"), key=prefix + K_STATEMENT, persist_state=PERSIST,
                              placeholder=t("e.g. a person opens the car door"),
                              help=t("Chord checks it on every sampled frame: a probability "
                                     "curve over time, an overall verdict, and the moments "
                                     "that support or contradict it."))
    else:
        query = st.text_area(t("Prompt (optional)"), key=prefix + K_PROMPT, persist_state=PERSIST,
                             height=90,
                             placeholder=t("Leave empty for a detailed description, or ask "
                                           "something specific about the clip."))
    return task, query


def show_error(err: dict | ChordError) -> None:
    """A readable error: what failed, then how to fix it. Never a traceback."""
    from chord_ui.messages import localized

    data = err.to_dict() if isinstance(err, ChordError) else err
    message, hint = localized(str(data.get("message") or "something went wrong"),
                              str(data.get("hint") or ""))
    text = md_escape(sentence_start(message))  # messages quote paths, names, text
    st.error(text + (f"\n\n**{t('How to fix:')}** {md_escape(hint)}" if hint else ""),
             icon=":material/error:")
