"""AppTest tests of the sidebar model panel: availability, download with progress, offline help."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest


def _repo() -> str:
    """A fresh hub id per test: the download manager is shared by the whole server."""
    return f"Qwen/fake-{uuid.uuid4().hex[:8]}"


def test_missing_hub_model_offers_download_test_model_and_offline_help(new_app,
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("CHORD_MODEL", "Qwen/Qwen2.5-VL-3B-Instruct")
    at = new_app().run()
    assert not at.exception
    warning = at.sidebar.warning[0].value
    assert warning.startswith("Not downloaded")
    labels = [b.label for b in at.sidebar.button]
    assert "Download (≈ 7.5 GB)" in labels
    assert "Use the test model instead" in labels
    code = [c.value for c in at.sidebar.code]
    assert code == ["hf download Qwen/Qwen2.5-VL-3B-Instruct --local-dir "
                    "/models/Qwen2.5-VL-3B-Instruct"]
    assert at.button(key="run").disabled


def test_failed_download_says_why(new_app, poll, monkeypatch) -> None:
    """HF_HUB_OFFLINE=1 (set for every test): the download fails fast with the fix."""
    repo = _repo()
    monkeypatch.setenv("CHORD_MODEL", repo)
    at = new_app().run()
    at.sidebar.button(key="download_model").click().run()
    poll(at, lambda a: bool(a.sidebar.error), timeout=30)
    message = at.sidebar.error[0].value
    assert repo in message and "How to fix" in message
    assert "Machine without internet?" in message  # points at the full offline recipe
    assert "Download (size unknown)" in [b.label for b in at.sidebar.button]  # can retry


def test_download_progress_then_available(new_app, poll, monkeypatch, tmp_path: Path) -> None:
    import chord_core.model.hub as hub

    repo, release = _repo(), threading.Event()
    folder = tmp_path / "snapshot"
    real_availability = hub.model_availability

    def fake_download(repo_id: str, *, on_progress=None, cache_dir=None) -> Path:
        on_progress(3_000_000_000, 7_500_000_000)
        release.wait(30)
        folder.mkdir()
        return folder

    def fake_availability(model: str, cache_dir=None) -> hub.Availability:
        if model == repo and folder.exists():
            return hub.Availability(True, str(folder), 7_500_000_000, "in the Hugging Face cache")
        return real_availability(model, cache_dir)

    monkeypatch.setattr(hub, "download_model", fake_download)
    monkeypatch.setattr(hub, "model_availability", fake_availability)
    monkeypatch.setenv("CHORD_MODEL", repo)
    at = new_app().run()
    at.sidebar.button(key="download_model").click().run()
    poll(at, lambda a: any("Downloading 3.0 GB of 7.5 GB" in p.text
                           for p in a.sidebar.get("progress")), timeout=20)
    release.set()
    poll(at, lambda a: bool(a.sidebar.success), timeout=20)
    assert at.sidebar.success[0].value == "Available locally · 7.5 GB"
    assert not at.exception


@pytest.mark.parametrize(("folder_state", "expect"), [
    ("missing", "Folder not found"),
    ("empty", "Incomplete: missing"),
], ids=["missing-folder", "incomplete-folder"])
def test_local_folder_checks(new_app, monkeypatch, tmp_path: Path, folder_state: str,
                             expect: str) -> None:
    folder = tmp_path / "qwen"
    if folder_state == "empty":
        folder.mkdir()
    monkeypatch.setenv("CHORD_MODEL", str(folder))
    at = new_app().run()
    assert at.sidebar.radio(key="model_source").value == "Local folder"
    assert at.sidebar.warning[0].value.startswith(expect)
    assert at.button(key="run").disabled


def test_picker_lists_both_families_with_size_and_memory(new_app, monkeypatch) -> None:
    from chord_core.model.planner import KNOWN_PARAMS, OVERHEAD

    monkeypatch.setenv("CHORD_MODEL", "Qwen/Qwen3-VL-8B-Instruct")
    at = new_app().run()
    assert not at.exception
    box = at.sidebar.selectbox(key="model_hub_id")
    need_gib = round(KNOWN_PARAMS["qwen3-vl-8b"] * 2 * OVERHEAD / 1024**3)
    assert "Qwen2.5-VL-7B-Instruct · 8.3 B · ≈ 19 GiB GPU" in box.options
    assert f"Qwen3-VL-8B-Instruct · 8.8 B · ≈ {need_gib} GiB GPU" in box.options
    assert "Qwen3-VL-30B-A3B-Instruct · 31.1 B · ≈ 69 GiB GPU" in box.options  # all experts
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "Qwen3-VL · 8.8 B parameters" in captions and f"≈ {need_gib} GiB" in captions
    assert "0–1000" in captions
    labels = [b.label for b in at.sidebar.button]
    assert "Download (≈ 17.5 GB)" in labels
    at.sidebar.button(key="use_test_model").click().run()
    assert at.sidebar.selectbox(key="model_test_family").value == "test-qwen3"


def test_test_model_of_each_family(new_app, monkeypatch) -> None:
    monkeypatch.setenv("CHORD_MODEL", "test-qwen3")
    at = new_app().run()
    assert not at.exception
    assert at.sidebar.radio(key="model_source").value == "Test model"
    assert at.sidebar.selectbox(key="model_test_family").value == "test-qwen3"
    assert any("Qwen3-VL family" in c.value for c in at.sidebar.caption)
    at.sidebar.selectbox(key="model_test_family").set_value("test").run()
    assert any("Qwen2.5-VL family" in c.value for c in at.sidebar.caption)
