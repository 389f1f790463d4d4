"""What a starting worker says about itself: the seconds left, estimated from the last start
of the same model, devices, mode and warmed-up tasks on this machine (``StartReport``), and
how ``/health`` shows a worker's start (``worker_view``: the compile cache's hits and misses,
the slowest worker's stage and seconds left)."""

from __future__ import annotations

import queue
import time

import pytest

from chord_core.config import ModelConfig
from chord_core.runtime.messages import Warming
from chord_core.runtime.startup import StartReport
from chord_core.runtime.workers import WorkerSpec
from chord_core.service import health


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CHORD_WARMUP_TASKS", raising=False)
    return tmp_path


def _spec(devices: tuple[int, ...] = (), model: str = "test") -> WorkerSpec:
    return WorkerSpec("w0", devices, ModelConfig(model=model))


def _left(report: StartReport, outbox: queue.Queue, detail: str = "loading the model"):
    report.step(detail)
    msg = outbox.get_nowait()
    assert isinstance(msg, Warming) and msg.step["detail"] == detail
    return msg.step["left_s"]


def test_the_first_start_has_no_estimate_and_the_next_counts_down_from_it(cache):
    outbox: queue.Queue = queue.Queue()
    first = StartReport(_spec(), outbox, time.perf_counter(), "full")
    assert _left(first, outbox) is None
    first.save({"total_s": 30.0, "ready_s": 30.0})
    ten_s_ago = time.perf_counter() - 10.0
    again = StartReport(_spec(), outbox, ten_s_ago, "full")
    assert 19.0 <= _left(again, outbox) <= 20.0  # 30 s last time, 10 s of it spent
    late = StartReport(_spec(), outbox, time.perf_counter() - 45.0, "full")
    assert _left(late, outbox) == 0.0  # past the last start's total: none left, not negative


@pytest.mark.parametrize("other", [
    {"mode": "lazy"}, {"devices": (0,)}, {"model": "test-qwen3"}, {"tasks": "describe"},
], ids=["mode", "devices", "model", "tasks"])
def test_a_start_of_another_kind_does_not_borrow_the_estimate(cache, monkeypatch, other):
    outbox: queue.Queue = queue.Queue()
    StartReport(_spec(), outbox, 0.0, "full").save({"total_s": 30.0})
    if "tasks" in other:
        monkeypatch.setenv("CHORD_WARMUP_TASKS", other["tasks"])
    spec = _spec(other.get("devices", ()), other.get("model", "test"))
    report = StartReport(spec, outbox, time.perf_counter(), other.get("mode", "full"))
    assert _left(report, outbox) is None


def test_a_background_warmup_counts_down_from_the_last_background_warmup(cache):
    outbox: queue.Queue = queue.Queue()
    StartReport(_spec(), outbox, 0.0, "lazy").save({"total_s": 50.0, "ready_s": 8.0,
                                                    "warmup_total_s": 40.0})
    now = time.perf_counter()
    report = StartReport(_spec(), outbox, now - 20.0, "lazy")
    report.startup = {"ready_s": 5.0}  # ready 5 s in: 15 s of the warm-up spent
    report.background = True
    left = _left(report, outbox, "capturing decode graphs (in the background)")
    assert 24.0 <= left <= 25.0


def test_an_unreadable_history_is_no_estimate_and_no_failure(cache):
    outbox: queue.Queue = queue.Queue()
    report = StartReport(_spec(), outbox, time.perf_counter(), "full")
    path = report._file()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert _left(StartReport(_spec(), outbox, time.perf_counter(), "full"), outbox) is None
    path.write_text("[1, 2]")
    assert _left(StartReport(_spec(), outbox, time.perf_counter(), "full"), outbox) is None


@pytest.mark.parametrize("startup, want", [
    ({"warmup_fx_cache_hits": 0.0, "warmup_fx_cache_misses": 4.0,
      "warmup_aot_cache_hits": 0.0, "warmup_aot_cache_misses": 6.0,
      "warmup_compiled_graphs": 6.0}, {"hits": 0, "misses": 10, "compiled_graphs": 6}),
    ({"warmup_fx_cache_hits": 4.0, "warmup_fx_cache_misses": 0.0,
      "warmup_aot_cache_hits": 6.0, "warmup_aot_cache_misses": 0.0,
      "warmup_compiled_graphs": 6.0}, {"hits": 10, "misses": 0, "compiled_graphs": 6}),
    ({"load_s": 3.0, "warmup_total_s": 2.0}, None),  # nothing compiled (a CPU worker)
    (None, None),                                     # still starting
], ids=["cold", "warm", "not-compiled", "starting"])
def test_health_shows_the_compile_caches_hits_and_misses(startup, want):
    row = {"worker": "gpu0", "state": "ready", "devices": [0], "startup": startup}
    view = health.worker_view(row)
    assert view.get("compile_cache") == want


def test_health_stage_is_the_slowest_workers_with_the_most_seconds_left():
    workers = [
        {"warming": {"step": "loading the model", "detail": "loading the model",
                     "left_s": 4.0}},
        {"warming": {"step": "capturing decode graphs", "detail": "capturing decode "
                     "graphs: 8 row(s)", "left_s": 12.5}},
        {"warming": {"step": "importing", "detail": "importing", "left_s": None}},
        {},
    ]
    assert health._stage(workers) == {"stage": "capturing decode graphs: 8 row(s)",
                                      "left_s": 12.5}
    assert health._stage([{"warming": {"step": "importing", "left_s": None}}]) == {
        "stage": "importing", "left_s": None}  # a first start: no estimate
    assert health._stage([{}]) == {}


@pytest.mark.parametrize("raw, want", [
    (None, ("describe", "ground", "entail")),
    ("", ("describe", "ground", "entail")),
    ("entail, Describe", ("describe", "entail")),  # TASKS order, any case and spacing
    ("ground", ("ground",)),
], ids=["unset", "empty", "two", "one"])
def test_warmup_tasks_reads_the_served_tasks(raw, want):
    from chord_core.runtime.startup import warmup_tasks

    assert warmup_tasks({} if raw is None else {"CHORD_WARMUP_TASKS": raw}) == want


def test_warmup_tasks_refuses_an_unknown_task_naming_the_known_ones():
    from chord_core.runtime.startup import warmup_tasks
    from chord_core.errors import ConfigError

    with pytest.raises(ConfigError, match="chat") as exc:
        warmup_tasks({"CHORD_WARMUP_TASKS": "describe,chat"})
    assert "describe,ground,entail" in exc.value.hint
