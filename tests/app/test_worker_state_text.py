"""The app's worker table says what a starting worker is doing and how long it has left,
and that a worker whose model could not be loaded failed (with the loader's message)."""

from __future__ import annotations

from chord_ui.gpu_view import state_text


def test_a_warming_worker_says_its_step_count_and_time_left() -> None:
    row = {"state": "starting", "warming": {"step": "capturing decode graphs",
                                            "detail": "capturing decode graphs: 8 row(s)",
                                            "done": 12, "total": 18, "left_s": 4.2}}
    text = state_text(row)
    assert text.startswith("starting — capturing decode graphs: 8 row(s)")
    assert "12/18" in text and "4" in text.split("12/18")[1]


def test_a_worker_without_its_model_says_failed_with_the_error() -> None:
    row = {"state": "ready", "model_loaded": False,
           "error": {"message": "could not load the weights in /m", "hint": "download again"}}
    assert state_text(row) == "failed: could not load the weights in /m"
    assert state_text({"state": "ready", "model_loaded": True}) == "ready"
