"""How many chunk jobs a long run queues, and a one-shot run's warm-up: the same rule for the
CLI, the service and the app (``longvideo.settings.chunks_in_flight``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from chord_core.longvideo.settings import chunks_in_flight, one_shot_env
from chord_core.service.long_jobs import LongRuns


@pytest.mark.parametrize(("width", "setting", "want"), [
    (8, 0, 16),    # one GPU worker at batch 8: one batch generating, the next being read
    (32, 0, 64),   # four workers at batch 8
    (1, 0, 2),     # at least two
    (0, 0, 2),     # the slots unknown
    (8, 3, 3),     # the settings' in_flight set: it wins
])
def test_two_batches_of_the_workers_slots_unless_set(width, setting, want):
    assert chunks_in_flight(width, setting) == want


def test_the_service_queues_two_batches_of_its_workers_slots():
    assert LongRuns(None, None, "m", width=8).in_flight() == 16
    workers = SimpleNamespace(workers=lambda: ["gpu0", "gpu1", "gpu2"])
    assert LongRuns(workers, None, "m").in_flight() == 6  # slots unknown: two per worker


def test_the_app_queues_two_batches_of_its_workers_slots(monkeypatch):
    from chord_ui import long_view, resources

    specs = [SimpleNamespace(model_cfg=SimpleNamespace(batch_size=b)) for b in (8, 4)]
    monkeypatch.setattr(resources, "worker_plan", lambda: SimpleNamespace(specs=specs))
    assert long_view._in_flight() == 24


def test_a_one_shot_run_skips_the_warm_up_and_batch_1s_graphs_unless_chosen(monkeypatch):
    assert one_shot_env({}) == {"CHORD_WARMUP": "off", "CHORD_ONE_ROW_GRAPHS": "0"}
    for chosen in ("full", "lazy", "auto"):
        env = {"CHORD_WARMUP": chosen, "CHORD_ONE_ROW_GRAPHS": "1"}
        assert one_shot_env(env) == {}
        assert env == {"CHORD_WARMUP": chosen, "CHORD_ONE_ROW_GRAPHS": "1"}  # not written
    assert one_shot_env({"CHORD_WARMUP": "  "}) == {  # blank is unset, as everywhere else
        "CHORD_WARMUP": "off", "CHORD_ONE_ROW_GRAPHS": "0"}
    monkeypatch.setenv("CHORD_ONE_ROW_GRAPHS", "1")  # default: this process's environment
    monkeypatch.delenv("CHORD_WARMUP", raising=False)
    assert one_shot_env() == {"CHORD_WARMUP": "off"}


def test_a_one_shot_run_decodes_uncompiled_unless_compile_was_chosen(monkeypatch):
    """From an empty cache the compile cost 15 s of a 103 s cold `chapters` run (H100): a
    one-shot run leaves it out; a CHORD_COMPILE the user set is kept either way."""
    from chord_core.config import model_config_from_env
    from chord_core.longvideo.settings import one_shot_config

    monkeypatch.delenv("CHORD_COMPILE", raising=False)
    cfg = model_config_from_env(model="test")
    assert cfg.compile is None and one_shot_config(cfg).compile is False
    for chosen, want in (("1", True), ("0", False)):
        monkeypatch.setenv("CHORD_COMPILE", chosen)
        assert one_shot_config(model_config_from_env(model="test")).compile is want
