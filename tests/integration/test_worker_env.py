"""Settings handed to workers through ``start_manager(worker_env=)`` reach the workers'
processes and leave the caller's environment alone (a one-shot CLI run in a test process,
say, must not change what later work in that process reads). A real spawned CPU worker on
the tiny model."""

from __future__ import annotations

import os

import pytest

from chord_core.config import ModelConfig
from chord_core.runtime.cluster import start_manager
from chord_core.runtime.parallel_config import ParallelConfig

pytestmark = pytest.mark.slow


def test_worker_env_reaches_the_worker_and_not_this_process(tiny_model_dir, tmp_path,
                                                            monkeypatch):
    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CHORD_WARMUP", raising=False)
    manager, plan = start_manager(ModelConfig(model="test", device="cpu"),
                                  ParallelConfig(cpu_workers=1), resume=False,
                                  worker_env={"CHORD_WARMUP": "lazy"})
    try:
        assert [s.env for s in plan.specs] == [(("CHORD_WARMUP", "lazy"),)]
        manager.wait_ready(180)
        (row,) = manager.workers()
        # a CPU worker's own default is no warm-up at all; lazy (the handed setting) is
        # ready first and warms up in the background
        assert row["startup"].get("warmup_background") == 1.0, row["startup"]
        assert "CHORD_WARMUP" not in os.environ
    finally:
        manager.shutdown()
