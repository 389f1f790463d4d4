"""Sidebar model choice and the model panel: is it here, can we fetch it, what else to do.

The choice is a hub id (Qwen2.5-VL or Qwen3-VL, each listed with its size and the GPU memory
the planner estimates it needs), a local folder, or a random-weight test model of either
family; the default comes from ``CHORD_MODEL`` (``config.model_config_from_env``), so
``CHORD_MODEL=test`` starts with the test model selected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from chord_core.config import (
    DEFAULT_MODEL,
    TEST_MODEL,
    TEST_MODEL_QWEN3,
    TEST_MODEL_QWEN3_THINKING,
    TEST_MODELS,
    model_config_from_env,
)
from chord_ui import resources
from chord_ui.formatting import human_bytes, md_escape, sentence_start, test_model_label
from chord_ui.i18n import choice_key, t

HUB_MODELS = ("Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct",
              "Qwen/Qwen2.5-VL-32B-Instruct", "Qwen/Qwen2.5-VL-72B-Instruct",
              "Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-4B-Instruct",
              "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-32B-Instruct",
              "Qwen/Qwen3-VL-30B-A3B-Instruct")
# bf16 safetensors, for the download button when the hub cannot be asked (Qwen3-VL: the
# planner's parameter count × 2 bytes).
APPROX_SIZES = {"Qwen/Qwen2.5-VL-3B-Instruct": 7.5e9, "Qwen/Qwen2.5-VL-7B-Instruct": 16.6e9,
                "Qwen/Qwen2.5-VL-32B-Instruct": 66.9e9, "Qwen/Qwen2.5-VL-72B-Instruct": 146.8e9,
                "Qwen/Qwen3-VL-2B-Instruct": 4.3e9, "Qwen/Qwen3-VL-4B-Instruct": 8.9e9,
                "Qwen/Qwen3-VL-8B-Instruct": 17.5e9, "Qwen/Qwen3-VL-32B-Instruct": 66.7e9,
                "Qwen/Qwen3-VL-30B-A3B-Instruct": 62.1e9}
TEST_CHOICES = {TEST_MODEL: "Qwen2.5-VL family", TEST_MODEL_QWEN3: "Qwen3-VL family",
                TEST_MODEL_QWEN3_THINKING: "Qwen3-VL-Thinking family"}
SOURCE_HUB, SOURCE_LOCAL, SOURCE_TEST = "Hub model", "Local folder", "Test model"
SOURCES = (SOURCE_HUB, SOURCE_LOCAL, SOURCE_TEST)
K_SOURCE, K_HUB, K_LOCAL, K_TEST = "model_source", "model_hub_id", "model_local_dir", \
    "model_test_family"


def model_facts(repo_id: str) -> dict[str, Any] | None:
    """Family, parameters and the GPU memory the planner would reserve for a known hub id
    (bf16 weights × the planner's overhead factor); None for ids it does not know."""
    from chord_core.errors import ConfigError
    from chord_core.model.planner import OVERHEAD, model_params

    try:
        params = model_params(repo_id)
    except ConfigError:
        return None
    name = repo_id.lower()
    family = "Qwen3-VL" if "qwen3-vl" in name else "Qwen2.5-VL" if "qwen2.5-vl" in name else ""
    return {"family": family, "params": params, "need_bytes": int(params * 2 * OVERHEAD),
            "moe": "-a3b" in name or "-a22b" in name}


def hub_label(repo_id: str) -> str:
    """``repo · family · size · memory`` for the model picker."""
    facts = model_facts(repo_id)
    if facts is None:
        return repo_id
    return (f"{repo_id.split('/')[-1]} · {facts['params'] / 1e9:.1f} B · "
            f"≈ {facts['need_bytes'] / 1024**3:.0f} GiB GPU")


def default_choice(model: str) -> tuple[str, str]:
    """(source, value) for a ``CHORD_MODEL``-style string."""
    if model in TEST_MODELS:
        return SOURCE_TEST, model
    if model.startswith(("/", ".", "~")) or Path(model).expanduser().is_dir():
        return SOURCE_LOCAL, model
    return SOURCE_HUB, model


def _init_state() -> None:
    if K_SOURCE in st.session_state:
        return
    source, value = default_choice(model_config_from_env().model)
    st.session_state[K_SOURCE] = source
    st.session_state[K_HUB] = value if source == SOURCE_HUB else DEFAULT_MODEL
    st.session_state[K_LOCAL] = value if source == SOURCE_LOCAL else ""
    st.session_state[K_TEST] = value if source == SOURCE_TEST else TEST_MODEL


def _use_test_model(model: str = "") -> None:
    """Switch to the test model of the missing model's family."""
    st.session_state[K_SOURCE] = SOURCE_TEST
    low = model.lower()
    st.session_state[K_TEST] = (TEST_MODEL_QWEN3_THINKING if "qwen3" in low and "thinking" in low
                                else TEST_MODEL_QWEN3 if "qwen3" in low else TEST_MODEL)


def model_selector() -> str | None:
    """Sidebar widgets; returns the model string (None when a local folder is not given)."""
    _init_state()
    st.radio(t("Model"), SOURCES, key=choice_key(K_SOURCE), persist_state="session",
             format_func=lambda s: t("Test model (random weights)") if s == SOURCE_TEST
             else t(s),
             help=t("A Hugging Face hub id, a folder with downloaded weights, or a tiny "
                    "random-weight model for trying Chord offline."))
    source = st.session_state[K_SOURCE]
    if source == SOURCE_HUB:
        options = list(HUB_MODELS)
        if st.session_state.get(K_HUB) and st.session_state[K_HUB] not in options:
            options.append(st.session_state[K_HUB])
        choice = st.selectbox(t("Hub id"), options, key=choice_key(K_HUB), accept_new_options=True,
                              persist_state="session", format_func=hub_label,
                              help=t("Pick one or type another Qwen2.5-VL / Qwen3-VL repo id. "
                                     "Sizes: parameters and the GPU memory Chord plans for "
                                     "(bf16 weights × 1.2)."))
        _facts_caption(choice)
        return choice
    if source == SOURCE_LOCAL:
        folder = st.text_input(t("Model folder"), key=K_LOCAL, persist_state="session",
                               placeholder="/models/Qwen2.5-VL-3B-Instruct")
        return folder.strip() or None
    return st.selectbox(t("Test model"), list(TEST_CHOICES), key=choice_key(K_TEST),
                        persist_state="session", format_func=_test_choice,
                        help=t("Tiny random-weight checkpoints with each family's files, "
                               "prompts and coordinate convention."))


def _test_choice(model: str) -> str:
    family = TEST_CHOICES[model].split()[0]
    return t("{family} family (test model)", family=family)


def _facts_caption(repo_id: str | None) -> None:
    facts = model_facts(repo_id) if repo_id else None
    if facts is None:
        return
    coords = "boxes in 0–1000 of the image" if facts["family"] == "Qwen3-VL" else \
        "boxes in input pixels"
    moe = " (mixture of experts: every expert is held in GPU memory)" if facts["moe"] else ""
    st.caption(f"{facts['family']} · {facts['params'] / 1e9:.1f} B parameters · needs ≈ "
               f"{facts['need_bytes'] / 1024**3:.0f} GiB of GPU memory{moe} · {coords}")


@st.cache_data(ttl=10, show_spinner=False)
def _availability(model: str, nonce: str) -> dict[str, Any]:
    """model_availability as plain data (cached briefly; ``nonce`` busts it after downloads).
    Hub models are looked up in the Hugging Face cache (HF_HOME / HF_HUB_CACHE)."""
    from chord_core.model.hub import model_availability

    a = model_availability(model)
    return {"available": bool(a.available), "local_path": str(a.local_path or ""),
            "size_bytes": a.size_bytes, "message": str(a.message or "")}


def model_panel(model: str | None) -> bool:
    """Show whether ``model`` can run now; offer download / test model. True when usable."""
    if model is None:
        st.info(t("Enter the folder that holds the model weights (config.json, "
                  "*.safetensors)."))
        return False
    if model in TEST_MODELS:
        st.caption(t("**{label}** ({family}) — a tiny checkpoint built locally on first use. "
                     "Its output is meaningless; use it to try Chord without downloading.",
                     label=t(test_model_label()), family=_test_choice(model)))
        _loaded_state(model)
        return True
    dl = resources.downloads().status(model)
    avail = _availability(model, dl.state if dl else "")
    if avail["available"]:
        size = f" · {human_bytes(avail['size_bytes'])}" if avail["size_bytes"] else ""
        st.success(t("Available locally") + size, icon=":material/check_circle:")
        if avail["local_path"]:
            st.caption(md_escape(avail["local_path"]))
        _loaded_state(model)
        return True
    message = (avail["message"] or "not on this machine").split(";")[0]
    st.warning(md_escape(sentence_start(message) + "."), icon=":material/cloud_off:")
    if "/" in model and not model.startswith(("/", ".", "~")):
        _download_section(model, avail["size_bytes"])
    st.button(t("Use the test model instead"), on_click=_use_test_model, args=(model,),
              key="use_test_model", width="stretch")
    _offline_help(model)
    return False


def _download_section(repo_id: str, size_bytes: int | None) -> None:
    """Download button (with size), live progress while it runs, the error if it failed."""
    status = resources.downloads().status(repo_id)
    if status is not None and status.state == "running":
        _download_progress(repo_id)
        return
    if status is not None and status.state == "failed" and status.error:
        hint = status.error.get("hint", "")
        if "hf download" in hint:  # the offline recipe, shown below in full
            hint = "download on a connected machine — see *Machine without internet?*"
        st.error(f"{status.error.get('message', 'download failed')}\n\n"
                 f"**How to fix:** {hint}", icon=":material/error:")
    elif status is not None and status.state == "done":
        st.caption(f"Downloaded to `{status.local_path}`, but the folder is not usable yet.")
    size = size_bytes or APPROX_SIZES.get(repo_id)
    label = f"Download ({'≈ ' + human_bytes(size) if size else 'size unknown'})"
    if st.button(label, key="download_model", type="primary", width="stretch",
                 icon=":material/download:"):
        resources.downloads().start(repo_id)
        st.rerun()


def _download_progress(repo_id: str) -> None:
    @st.fragment(run_every=1.0)
    def poll() -> None:
        status = resources.downloads().status(repo_id)
        if status is None:
            return
        if status.state != "running":
            st.rerun()
        frac = status.fraction
        text = (f"Downloading {human_bytes(status.done_bytes)} of "
                f"{human_bytes(status.total_bytes)}" if status.total_bytes
                else f"Downloading… {status.message}")
        st.progress(frac or 0.0, text=text)

    poll()


def _offline_help(model: str) -> None:
    repo = model if "/" in model and not model.startswith(("/", ".", "~")) else DEFAULT_MODEL
    folder = f"/models/{repo.split('/')[-1]}"
    with st.expander("Machine without internet?"):
        st.markdown("Download on a connected machine, copy the folder over, then choose "
                    "**Local folder** above (or start Chord with `CHORD_MODEL=<folder>`):")
        st.code(f"hf download {repo} --local-dir {folder}", language="bash", wrap_lines=True)
        st.caption("`hf` comes with `pip install -U huggingface_hub`. A copied Hugging Face "
                   "cache works too: set `HF_HUB_OFFLINE=1` so Chord uses it without the hub.")


def _loaded_state(model: str) -> None:
    state = resources.job_manager().model_state()
    if state.get("model") != model:
        st.caption(t("Loads on the first run and stays in memory for every session."))
        return
    if state["state"] == "ready":
        st.caption(":material/memory: " + t("Loaded and ready."))
    elif state["state"] == "loading":
        st.caption(":material/hourglass_top: " + t("Loading…"))
    elif state["state"] == "failed":
        err = state.get("error") or {}
        st.error(f"Could not load: {md_escape(err.get('message', 'unknown error'))}\n\n"
                 f"{md_escape(err.get('hint', ''))}")
