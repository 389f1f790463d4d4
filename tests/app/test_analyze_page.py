"""AppTest tests of the Analyze page: widgets, runs with the test model, errors, uploads."""

from __future__ import annotations

from pathlib import Path

import pytest


def _texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for e in at.subheader] + [w.value for w in at.warning]
    parts += [c.value for c in at.code] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def _set_path(at, path: Path):
    at.text_input(key="local_path").input(str(path))
    return at.run()


def _has_result(at) -> bool:
    return any(s.value for s in at.subheader) or bool(at.error)


def test_widgets_present(new_app) -> None:
    at = new_app().run()
    assert not at.exception
    assert at.title[0].value == "Analyze a clip"
    assert [r.label for r in at.sidebar.radio] == ["Model"]
    assert at.sidebar.radio(key="model_source").value == "Test model"  # CHORD_MODEL=test
    gen = at.sidebar.slider(key="max_new_tokens")
    assert (gen.min, gen.max, gen.value) == (128, 2048, 512)
    assert at.sidebar.toggle(key="fps_auto").value is True
    assert at.sidebar.number_input(key="max_frames").value == 768
    assert at.sidebar.select_slider(key="tokens_per_frame").value == "auto"
    assert at.sidebar.slider(key="token_budget").value == 24_000
    assert len(at.file_uploader) == 1
    assert set(at.file_uploader[0].allowed_type) >= {".mp4", ".avi", ".mov", ".mkv", ".webm"}
    assert at.segmented_control(key="task").value == "describe"
    assert at.button(key="run").disabled  # no clip yet
    assert "random weights" in _texts(at)


@pytest.mark.parametrize(("env_model", "source", "widget_key", "value"), [
    ("test", "Test model", None, None),
    ("Qwen/Qwen2.5-VL-7B-Instruct", "Hub model", "model_hub_id", "Qwen/Qwen2.5-VL-7B-Instruct"),
    ("/nonexistent/qwen-folder", "Local folder", "model_local_dir", "/nonexistent/qwen-folder"),
], ids=["test-model", "hub-id", "local-folder"])
def test_model_default_follows_chord_model(new_app, monkeypatch, env_model, source,
                                           widget_key, value) -> None:
    monkeypatch.setenv("CHORD_MODEL", env_model)
    at = new_app().run()
    assert not at.exception
    assert at.sidebar.radio(key="model_source").value == source
    if widget_key == "model_hub_id":
        assert at.sidebar.selectbox(key=widget_key).value == value
        assert any("Download" in b.label for b in at.sidebar.button)  # not in the HF cache
        assert any("hf download Qwen/Qwen2.5-VL-7B-Instruct" in c.value for c in at.code)
    elif widget_key:
        assert at.sidebar.text_input(key=widget_key).value == value
        assert "folder not found" in " ".join(w.value.lower() for w in at.sidebar.warning)
        assert at.button(key="run").disabled


def test_use_test_model_button_switches(new_app, monkeypatch) -> None:
    monkeypatch.setenv("CHORD_MODEL", "Qwen/Qwen2.5-VL-3B-Instruct")
    at = new_app().run()
    at.sidebar.button(key="use_test_model").click().run()
    assert at.sidebar.radio(key="model_source").value == "Test model"


def test_path_shows_probe_facts_and_plan(new_app, app_clip: Path) -> None:
    at = _set_path(new_app().run(), app_clip)
    assert not at.exception and not at.error
    facts = _texts(at)
    assert "Duration **3 s**" in facts
    assert "Size **320×240**" in facts
    assert "Frame rate **10.00 fps**" in facts
    assert "Plan:" in _texts(at) and "visual tokens" in _texts(at)
    assert not at.button(key="run").disabled


def _players(at) -> list:  # noqa: ANN001
    """The result player components on the page (``chord_ui.player``)."""
    return [e for e in at.main if "chord_player" in repr(getattr(e, "proto", ""))]


@pytest.mark.parametrize(("task", "query"), [
    ("describe", ""),
    ("ground", "the green square"),
], ids=["describe", "ground"])
@pytest.mark.slow
def test_run_reaches_results(new_app, poll, app_clip: Path, task: str, query: str) -> None:
    at = _set_path(new_app().run(), app_clip)
    at.segmented_control(key="task").set_value(task).run()
    if task == "ground":
        at.text_input(key="ground_target").input(query).run()
    at.button(key="run").click().run()
    assert not at.exception
    poll(at, _has_result)
    assert not at.error, [e.value for e in at.error]
    text = _texts(at)
    assert "random weights" in text
    buttons = {b.label for b in at.get("download_button")}
    assert "Result JSON" in buttons
    if task == "describe":
        assert at.subheader[0].value == "Description"
        assert at.code, "the description is offered as a copyable block"
    else:
        head = at.subheader[0].value
        assert head.startswith("“the green square”")
        assert ("appears in" in head) or ("not found in" in head and "sampled frames" in head)
        assert len(_players(at)) == 1  # the in-page player (its timeline replaces Plotly's)
        assert not at.get("plotly_chart")
        assert "Detections CSV" in buttons
        assert at.button(key=[b.key for b in at.button if b.key.startswith("make-mp4")][0])
    shown = (at.subheader[0].value, [c.value for c in at.code], buttons)
    poll(at, _has_result, timeout=5)  # another rerun: the same result stays on screen
    assert (at.subheader[0].value, [c.value for c in at.code],
            {b.label for b in at.get("download_button")}) == shown


@pytest.mark.slow
def test_annotated_video_on_demand(new_app, poll, app_clip: Path, app_env) -> None:
    at = _set_path(new_app().run(), app_clip)
    at.segmented_control(key="task").set_value("ground").run()
    at.text_input(key="ground_target").input("the square").run()
    at.button(key="run").click().run()
    poll(at, _has_result)
    make = [b for b in at.button if b.key.startswith("make-mp4")][0]
    make.click().run()  # the render runs in a background thread; the page polls it
    assert not at.exception and not at.error
    poll(at, lambda a: "Annotated MP4" in {b.label for b in a.get("download_button")})
    assert not at.error
    videos = list((app_env["data"] / "exports").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000


@pytest.mark.parametrize("maker", ["make_text_as_mp4", "make_zero_byte"],
                         ids=["text-named-mp4", "zero-bytes"])
def test_bad_file_shows_message_not_traceback(new_app, tmp_path: Path, maker: str) -> None:
    from chord_core.testing import videos

    bad = getattr(videos, maker)(tmp_path / "broken.mp4")
    at = _set_path(new_app().run(), bad)
    assert not at.exception
    assert at.error, "a bad file must say what is wrong"
    message = at.error[0].value
    assert "broken.mp4" in message or "video" in message.lower()
    assert "How to fix" in message
    assert "Traceback" not in message
    assert at.button(key="run").disabled


def test_missing_path_is_explained(new_app, tmp_path: Path, app_clip: Path) -> None:
    import shutil

    shutil.copyfile(app_clip, tmp_path / "street-01.mp4")
    at = _set_path(new_app().run(), tmp_path / "street-1.mp4")  # a typo, inside a root
    assert not at.exception
    message = at.error[0].value.replace("\\", "")  # markdown escapes aside
    assert message.startswith("No such file in ") and "street-1.mp4" in message
    assert "did you mean street-01.mp4?" in message
    at = _set_path(at, "/etc/nope.mp4")  # outside the roots: the one refusal, no oracle
    assert "is not a video file under the media roots" in at.error[0].value


def test_ground_without_target_says_so(new_app, app_clip: Path) -> None:
    at = _set_path(new_app().run(), app_clip)
    at.segmented_control(key="task").set_value("ground").run()
    assert not at.exception
    assert at.button(key="run").disabled  # nothing to look for: Run is off, and says why
    assert "Type what to look for to run." in _texts(at)
    at.text_input(key="ground_target").input("   ").run()
    assert at.button(key="run").disabled
    at.text_input(key="ground_target").input("the square").run()
    assert not at.button(key="run").disabled


def test_run_again_with_the_same_settings_says_so(new_app, poll, app_clip: Path,
                                                  truth_engine) -> None:
    at = _set_path(new_app().run(), app_clip)
    at.segmented_control(key="task").set_value("ground").run()
    at.text_input(key="ground_target").input("green square").run()
    at.button(key="run").click().run()
    poll(at, _has_result)
    assert "earlier run's result" not in _texts(at)
    head = at.subheader[0].value
    at.button(key="run").click().run()
    assert not at.exception
    assert "this is the earlier run's result, not a new analysis" in _texts(at)
    assert at.subheader[0].value == head  # the result stays on the page


def test_upload_saved_once_by_content_hash(new_app, app_clip: Path, app_env) -> None:
    data = app_clip.read_bytes()
    at = new_app().run()
    at.file_uploader[0].set_value(("my clip.mp4", data, "video/mp4")).run()
    assert not at.exception and not at.error
    assert "Size **320×240**" in _texts(at)
    at.file_uploader[0].set_value(("same again.mp4", data, "video/mp4")).run()
    saved = list((app_env["data"] / "uploads").iterdir())
    assert len(saved) == 1 and saved[0].read_bytes() == data
    assert "same again.mp4" in _texts(at)


def test_grounding_views_with_detections(new_app, poll, app_clip: Path, truth, truth_engine
                                         ) -> None:
    """Timeline, scrubber, gallery and table when the target IS found (ground-truth engine:
    the square is reported on every sampled frame except those in 1.0–2.0 s)."""
    from chord_core.analysis.request import AnalysisRequest

    truth = truth(AnalysisRequest(str(app_clip), "ground", "green square"))
    assert 2 <= len(truth.detections) < truth.sampling.num_frames
    at = _set_path(new_app().run(), app_clip)
    at.segmented_control(key="task").set_value("ground").run()
    at.text_input(key="ground_target").input("green square").run()
    at.button(key="run").click().run()
    poll(at, _has_result)
    head = at.subheader[0].value
    assert head.startswith("“green square” appears in ")
    first = truth.detections[0].t_s
    assert f"{first:.1f}–" in head
    assert not any("random weights" in w.value for w in at.main.warning)
    table = at.dataframe[0].value
    assert len(table) == len(truth.detections)
    assert list(table.columns)[:7] == ["t (s)", "frame", "x1", "y1", "x2", "y2", "label"]
    assert set(table["label"]) == {"green square"}
    assert len(at.image) == min(len(truth.detections), 8)  # the key frames
    (player,) = _players(at)
    assert not at.exception


def test_progress_and_cancel(new_app, poll, app_clip: Path, slow_engine) -> None:
    """While a job runs: named stage, progress bar, elapsed, resource strip, Cancel works."""
    at = _set_path(new_app().run(), app_clip)
    at.segmented_control(key="task").set_value("ground").run()
    at.text_input(key="ground_target").input("anything").run()
    at.button(key="run").click().run()
    poll(at, lambda a: any("Looking for the target: frame" in m.value for m in a.markdown),
         timeout=20)
    assert at.button(key="run").disabled  # one job per clip and task at a time
    bars = [p.value for p in at.get("progress")]
    assert any(0 < v < 100 for v in bars)
    assert any("CPU" in p.text or "GPU" in p.text
               for p in at.get("progress"))
    assert any("Elapsed" in c.value for c in at.caption)
    cancel = [b for b in at.button if b.key and b.key.startswith("cancel-")][0]
    cancel.click().run()
    poll(at, lambda a: any("Cancelled after" in i.value for i in a.info), timeout=20)
    assert not at.button(key="run").disabled


def test_results_and_settings_survive_a_page_switch(new_app, poll, app_clip: Path,
                                                    truth_engine) -> None:
    at = _set_path(new_app().run(), app_clip)
    at.sidebar.slider(key="max_new_tokens").set_value(1024).run()
    at.segmented_control(key="task").set_value("ground").run()
    at.text_input(key="ground_target").input("green square").run()
    at.button(key="run").click().run()
    poll(at, _has_result)
    head = at.subheader[0].value
    at.switch_page("views/gpus.py").run()
    assert at.title[0].value == "GPUs"
    at.switch_page("views/analyze.py").run()
    assert not at.exception
    assert at.subheader[0].value == head
    assert at.segmented_control(key="task").value == "ground"
    assert at.text_input(key="ground_target").value == "green square"
    assert at.sidebar.slider(key="max_new_tokens").value == 1024
