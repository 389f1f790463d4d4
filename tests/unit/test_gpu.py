"""chord_core.gpus.sampler against a fake ``pynvml`` module placed in sys.modules (the NVML boundary)."""

from __future__ import annotations

import logging
import pickle
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest

from chord_core.errors import ConfigError
from chord_core.gpus.nvml import (
    MIB,
    REASON_NO_GPU,
    REASON_NO_PYNVML,
    GpuSample,
    Nvml,
    ProcessInfo,
    cuda_ordinals,
)
from chord_core.gpus.sampler import GpuSampler

UUID_A = "GPU-aaaa1111-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbb2222-0000-0000-0000-000000000000"
UUID_C = "GPU-aaaa3333-0000-0000-0000-000000000000"  # shares the prefix "GPU-aaaa" with A


# --------------------------------------------------------------------------- fake pynvml


class FakeNVMLError(Exception):
    pass


class FakeNotSupported(FakeNVMLError):
    pass


class FakeNoPermission(FakeNVMLError):
    pass


class FakeGpuIsLost(FakeNVMLError):
    pass


class FakeLibraryNotFound(FakeNVMLError):
    def __str__(self) -> str:
        return "NVML Shared Library Not Found"


@dataclass
class FakeGpu:
    """Readings of one fake GPU; an exception instance as a value makes that query raise it."""

    name: Any = b"NVIDIA Fake H200"
    uuid: Any = UUID_A
    util: Any = 37
    mem: Any = (2048 * MIB, 8192 * MIB)
    temp: Any = 41
    power_mw: Any = 123_500
    limit_mw: Any = 700_000
    procs: Any = field(default_factory=list)


def _value(v: Any) -> Any:
    if isinstance(v, BaseException):
        raise v
    return v


def make_fake_pynvml(gpus: list[FakeGpu],
                     init_error: BaseException | None = None) -> types.ModuleType:
    nv = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    nv.NVMLError_NotSupported = FakeNotSupported
    nv.NVMLError_NoPermission = FakeNoPermission
    nv.NVML_TEMPERATURE_GPU = 0
    nv.calls = {"init": 0, "shutdown": 0, "sample_passes": 0}

    def nvmlInit() -> None:
        nv.calls["init"] += 1
        time.sleep(0.01)  # widen the window for a racing second initialiser
        _value(init_error)

    def nvmlShutdown() -> None:
        nv.calls["shutdown"] += 1

    def util(h: int) -> Any:
        nv.calls["sample_passes"] += h == 0
        return types.SimpleNamespace(gpu=_value(gpus[h].util), memory=0)

    def mem(h: int) -> Any:
        used, total = _value(gpus[h].mem)
        return types.SimpleNamespace(used=used, total=total, free=total - used)

    def procs(h: int) -> Any:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=m) for pid, m in _value(gpus[h].procs)]

    def process_name(pid: int) -> Any:
        if pid == 999:
            raise FakeNVMLError("Not Found")
        return f"/usr/bin/proc{pid}".encode()

    nv.nvmlInit = nvmlInit
    nv.nvmlShutdown = nvmlShutdown
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetName = lambda h: _value(gpus[h].name)
    nv.nvmlDeviceGetUUID = lambda h: _value(gpus[h].uuid)
    nv.nvmlDeviceGetUtilizationRates = util
    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetTemperature = lambda h, sensor: _value(gpus[h].temp)
    nv.nvmlDeviceGetPowerUsage = lambda h: _value(gpus[h].power_mw)
    nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: _value(gpus[h].limit_mw)
    nv.nvmlDeviceGetComputeRunningProcesses = procs
    nv.nvmlSystemGetProcessName = process_name
    return nv


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch):
    """install(gpus, init_error=None) → the fake module, placed as ``pynvml``."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def _install(gpus: list[FakeGpu], init_error: BaseException | None = None) -> types.ModuleType:
        fake = make_fake_pynvml(gpus, init_error)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return _install


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# --------------------------------------------------------------------------- Nvml


def test_sample_converts_units_and_decodes_names(install) -> None:
    install([FakeGpu(procs=[(4242, 512 * MIB)])])
    nvml = Nvml()
    [s] = nvml.sample_all(t=12.5)
    assert (s.t, s.index, s.cuda_ordinal) == (12.5, 0, 0)
    assert (s.name, s.uuid) == ("NVIDIA Fake H200", UUID_A)
    assert (s.utilization_pct, s.memory_used_mib, s.memory_total_mib) == (37.0, 2048.0, 8192.0)
    assert (s.temperature_c, s.power_w, s.power_limit_w) == (41.0, 123.5, 700.0)
    assert s.memory_pct == pytest.approx(25.0)
    assert s.processes == (ProcessInfo(pid=4242, used_memory_mib=512.0, name="proc4242"),)
    assert s.job is None


FIELD_CASES = [
    # (FakeGpu field, error, GpuSample fields that must become None)
    ("util", FakeNotSupported(), ["utilization_pct"]),
    ("mem", FakeNoPermission(), ["memory_used_mib", "memory_total_mib"]),
    ("temp", FakeNotSupported(), ["temperature_c"]),
    ("power_mw", FakeGpuIsLost(), ["power_w"]),
    ("limit_mw", FakeNVMLError("Unknown Error"), ["power_limit_w"]),
]


@pytest.mark.parametrize("gpu_field, error, none_fields", FIELD_CASES,
                         ids=[c[0] for c in FIELD_CASES])
def test_unsupported_query_becomes_none_only_for_that_field(install, gpu_field, error,
                                                            none_fields) -> None:
    install([FakeGpu(**{gpu_field: error})])
    [s] = Nvml().sample_all()
    readings = ["utilization_pct", "memory_used_mib", "memory_total_mib", "temperature_c",
                "power_w", "power_limit_w"]
    for name in readings:
        value = getattr(s, name)
        assert (value is None) == (name in none_fields), name


def test_everything_unsupported_still_yields_a_sample(install) -> None:
    err = FakeNotSupported()
    install([FakeGpu(name=err, uuid=err, util=err, mem=err, temp=err, power_mw=err, limit_mw=err,
                     procs=err)])
    [s] = Nvml().sample_all()
    assert s.name == "GPU 0" and s.uuid == "" and s.processes == ()
    assert s.utilization_pct is None and s.memory_pct is None and s.power_w is None


def test_process_memory_not_available_and_unknown_name(install) -> None:
    install([FakeGpu(procs=[(999, None), (7, 1 * MIB)])])
    [s] = Nvml().sample_all()
    assert s.processes == (ProcessInfo(999, None, None), ProcessInfo(7, 1.0, "proc7"))


def test_a_non_nvml_error_is_not_swallowed(install) -> None:
    install([FakeGpu(util=RuntimeError("bug in our code"))])
    with pytest.raises(RuntimeError, match="bug in our code"):
        Nvml().sample_all()


INIT_CASES = [
    ("pynvml-missing", "missing", REASON_NO_PYNVML),
    ("no-driver", "init-error",
     "NVML could not initialise: NVML Shared Library Not Found (no NVIDIA driver?)"),
    ("zero-gpus", "zero", REASON_NO_GPU),
]


@pytest.mark.parametrize("case, reason", [(c[1], c[2]) for c in INIT_CASES],
                         ids=[c[0] for c in INIT_CASES])
def test_unavailable_nvml_reports_reason(install, monkeypatch, case, reason) -> None:
    if case == "missing":
        monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml → ImportError
    else:
        install([] if case == "zero" else [FakeGpu()],
                init_error=FakeLibraryNotFound() if case == "init-error" else None)
    nvml = Nvml()
    assert nvml.available is False
    assert nvml.reason == reason
    assert nvml.device_count() == 0 and nvml.sample_all() == [] and nvml.cuda_ordinal_map() == {}


def test_available_nvml_has_empty_reason_and_inits_lazily_once(install) -> None:
    fake = install([FakeGpu(), FakeGpu(uuid=UUID_B)])
    nvml = Nvml()
    assert fake.calls["init"] == 0  # nothing happens at construction
    threads = [threading.Thread(target=lambda: nvml.available) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    nvml.sample_all()
    assert fake.calls["init"] == 1
    assert nvml.available and nvml.reason == "" and nvml.device_count() == 2
    nvml.close()
    assert fake.calls["shutdown"] == 1


def test_nvml_reads_cuda_visible_devices(install, monkeypatch) -> None:
    install([FakeGpu(), FakeGpu(uuid=UUID_B)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    samples = Nvml().sample_all()
    assert [(s.index, s.cuda_ordinal) for s in samples] == [(0, None), (1, 0)]
    explicit = Nvml(visible_devices=None).sample_all()  # None = treat as unset
    assert [(s.index, s.cuda_ordinal) for s in explicit] == [(0, 0), (1, 1)]


# --------------------------------------------------------------------------- CUDA ordinals

ORDINAL_CASES = [
    ("unset", None, {0: 0, 1: 1, 2: 2}),
    ("empty", "", {0: None, 1: None, 2: None}),
    ("reversed", "2,1,0", {0: 2, 1: 1, 2: 0}),
    ("subset", "1", {0: None, 1: 0, 2: None}),
    ("spaces", " 2 , 0 ", {0: 1, 1: None, 2: 0}),
    ("leading-digits", "1abc", {0: None, 1: 0, 2: None}),
    ("out-of-range-stops", "2,5,0", {0: None, 1: None, 2: 0}),
    ("out-of-range-first", "7", {0: None, 1: None, 2: None}),
    ("negative-hides-all", "-1", {0: None, 1: None, 2: None}),
    ("negative-stops", "1,-1,0", {0: None, 1: 0, 2: None}),
    ("duplicate-hides-all", "0,1,0", {0: None, 1: None, 2: None}),
    ("full-uuid", f"{UUID_B},{UUID_A}", {0: 1, 1: 0, 2: None}),
    ("uuid-prefix", "GPU-bbbb", {0: None, 1: 0, 2: None}),
    ("uuid-ambiguous-prefix", "GPU-aaaa", {0: None, 1: None, 2: None}),
    ("uuid-case", UUID_C.upper(), {0: None, 1: None, 2: 0}),
    ("uuid-unknown", "GPU-ffff", {0: None, 1: None, 2: None}),
    ("mixed-kinds-stop", f"1,{UUID_A}", {0: None, 1: 0, 2: None}),
    ("mig-unsupported", "MIG-1234-5678", {0: None, 1: None, 2: None}),
    ("trailing-comma", "0,", {0: 0, 1: None, 2: None}),
]


@pytest.mark.parametrize("visible, expected", [c[1:] for c in ORDINAL_CASES],
                         ids=[c[0] for c in ORDINAL_CASES])
def test_cuda_ordinals(visible, expected) -> None:
    assert cuda_ordinals(visible, [UUID_A, UUID_B, UUID_C]) == expected


def test_cuda_ordinals_no_gpus() -> None:
    assert cuda_ordinals(None, []) == {} and cuda_ordinals("0", []) == {}


# --------------------------------------------------------------------------- samples


def test_samples_pickle_dict_access_and_round_trip(install) -> None:
    install([FakeGpu(procs=[(5, 3 * MIB)])])
    [s] = Nvml().sample_all(t=1.0)
    assert pickle.loads(pickle.dumps(s)) == s
    assert s["utilization"] == 37.0 and s["memory_used_mib"] == 2048.0 and s["memory_pct"] == 25.0
    assert s.get("nope", "default") == "default"
    with pytest.raises(KeyError):
        s["ram_pct"]  # a SystemSample key, not a GpuSample one
    data = s.to_dict()
    assert data["processes"] == [{"pid": 5, "used_memory_mib": 3.0, "name": "proc5"}]
    assert data["memory_pct"] == 25.0
    assert GpuSample.from_dict(data) == s


# --------------------------------------------------------------------------- sampler


def test_history_is_trimmed_by_time(install) -> None:
    install([FakeGpu(), FakeGpu(uuid=UUID_B)])
    clock = Clock()
    sampler = GpuSampler(interval_s=1.0, history_s=10.0, clock=clock)
    start = clock.t
    for _ in range(25):
        sampler.sample_now()
        clock.t += 1.0
    now = clock.t - 1.0
    history = sampler.history()
    assert sorted(history) == [0, 1]
    for samples in history.values():
        times = [s.t for s in samples]
        assert times == sorted(times) and times[0] >= now - 10.0 and times[-1] == now
        assert len(times) == 11  # now-10 .. now inclusive
    system_times = [s.t for s in sampler.system_history()]
    assert system_times[0] == now - 10.0 and len(system_times) == 11
    assert start not in system_times


def test_reads_return_copies(install) -> None:
    install([FakeGpu()])
    sampler = GpuSampler(interval_s=1.0, history_s=10.0, clock=Clock())
    sampler.sample_now()
    sampler.latest().clear()
    sampler.history()[0].clear()
    sampler.history().clear()
    sampler.system_history().clear()
    sampler.job_labels()[0] = "x"
    assert len(sampler.latest()) == 1 and len(sampler.history()[0]) == 1
    assert len(sampler.system_history()) == 1 and sampler.job_labels() == {}


def test_cpu_and_ram_are_sampled_without_nvidia(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = GpuSampler(interval_s=0.05, history_s=5.0)
    sum(i * i for i in range(200_000))  # some CPU work between the two psutil readings
    gpus = sampler.sample_now()
    system = sampler.system_latest()
    assert gpus == [] and sampler.available is False and sampler.reason == REASON_NO_PYNVML
    assert system is not None and system.cpu_pct is not None and 0.0 <= system.cpu_pct <= 100.0
    assert system.ram_total_mib == pytest.approx(psutil.virtual_memory().total / MIB)
    assert 0 < system.ram_used_mib <= system.ram_total_mib
    assert system["cpu"] == system.cpu_pct and 0 < system.ram_pct <= 100
    assert set(system.to_dict()) == {"t", "cpu_pct", "ram_used_mib", "ram_total_mib", "ram_pct"}


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "chord-gpu-sampler"]


def test_thread_starts_once_and_stops(install) -> None:
    install([FakeGpu()])
    sampler = GpuSampler(interval_s=0.02, history_s=5.0)
    before = len(_sampler_threads())
    sampler.start()
    sampler.start()
    sampler.start()
    try:
        assert len(_sampler_threads()) == before + 1 and sampler.running
        assert wait_for(lambda: len(sampler.history().get(0, [])) >= 3)
    finally:
        sampler.stop()
    assert not sampler.running and len(_sampler_threads()) == before
    count = len(sampler.history()[0])
    time.sleep(0.1)
    assert len(sampler.history()[0]) == count  # no sampling after stop
    sampler.start()  # restartable
    try:
        assert wait_for(lambda: len(sampler.history()[0]) > count)
    finally:
        sampler.stop()


def test_subscribers_receive_samples_until_unsubscribed(install) -> None:
    install([FakeGpu(), FakeGpu(uuid=UUID_B)])
    sampler = GpuSampler(interval_s=0.02, history_s=5.0)
    received: list[list[GpuSample]] = []
    sampler.subscribe(received.append)
    sampler.subscribe(received.append)  # subscribing twice delivers once
    sampler.start()
    try:
        assert wait_for(lambda: len(received) >= 3)
        assert sampler.unsubscribe(received.append) is True
        assert sampler.unsubscribe(received.append) is False
        time.sleep(0.05)  # let a pass in flight finish
        n = len(received)
        time.sleep(0.1)
        assert len(received) == n
    finally:
        sampler.stop()
    assert all([s.index for s in batch] == [0, 1] for batch in received)
    times = [batch[0].t for batch in received]
    assert len(set(times)) == len(times)  # one batch per pass, never the same pass twice


def test_raising_subscriber_does_not_stop_the_thread(install, caplog) -> None:
    install([FakeGpu()])
    sampler = GpuSampler(interval_s=0.02, history_s=5.0)
    good: list[list[GpuSample]] = []

    def bad(samples: list[GpuSample]) -> None:
        raise RuntimeError("subscriber bug")

    sampler.subscribe(bad)
    sampler.subscribe(good.append)
    with caplog.at_level(logging.ERROR, logger="chord_core.gpus.sampler"):
        sampler.start()
        try:
            assert wait_for(lambda: len(good) >= 3)
            assert sampler.running
        finally:
            sampler.stop()
    assert any("subscriber" in r.getMessage() and r.exc_info for r in caplog.records)


def test_failing_pass_is_logged_and_sampling_continues(install, caplog) -> None:
    fake = install([FakeGpu()])
    calls = {"n": 0}
    real = fake.nvmlDeviceGetUtilizationRates

    def flaky(h: int) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("one bad pass")
        return real(h)

    fake.nvmlDeviceGetUtilizationRates = flaky
    sampler = GpuSampler(interval_s=0.02, history_s=5.0)
    with caplog.at_level(logging.ERROR, logger="chord_core.gpus.sampler"):
        sampler.start()
        try:
            assert wait_for(lambda: len(sampler.history().get(0, [])) >= 2)
        finally:
            sampler.stop()
    assert any("pass failed" in r.getMessage() for r in caplog.records)


def test_job_labels_by_nvml_index_and_cuda_ordinal(install, monkeypatch) -> None:
    install([FakeGpu(), FakeGpu(uuid=UUID_B)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    sampler = GpuSampler(interval_s=1.0, history_s=10.0, clock=Clock())
    assert sampler.set_job_label(0, "job-a") is True              # NVML index 0
    assert sampler.set_job_label(0, "job-b", by="cuda") is True   # CUDA 0 = NVML 1
    assert sampler.set_job_label(5, "nope", by="cuda") is False
    assert [s.job for s in sampler.sample_now()] == ["job-a", "job-b"]
    assert sampler.set_job_label(1, None) is True
    assert [s.job for s in sampler.sample_now()] == ["job-a", None]
    assert [s.job for s in sampler.history()[1]] == ["job-b", None]  # history keeps old labels
    with pytest.raises(ValueError):
        sampler.set_job_label(0, "x", by="pci")  # type: ignore[arg-type]


@pytest.mark.parametrize("interval_s, history_s", [(0, 10), (-1, 10), (2, 1)],
                         ids=["zero-interval", "negative-interval", "history-shorter"])
def test_invalid_sampler_settings(interval_s, history_s) -> None:
    with pytest.raises(ConfigError):
        GpuSampler(interval_s=interval_s, history_s=history_s)


# --------------------------------------------------------------------------- MIG instances
MIG_A = "MIG-11111111-2222-3333-4444-555555555555"
MIG_B = "MIG-66666666-7777-8888-9999-000000000000"


def _with_migs(fake: types.ModuleType) -> types.ModuleType:
    """GPU 1 of the fake is in MIG mode with two instances (handles 100, 101)."""
    instances = {100: (MIG_A, 10 * 1024 * MIB), 101: (MIG_B, 20 * 1024 * MIB)}
    get_uuid, get_mem = fake.nvmlDeviceGetUUID, fake.nvmlDeviceGetMemoryInfo
    fake.nvmlDeviceGetMigMode = lambda h: (1, 1) if h == 1 else (0, 0)
    fake.nvmlDeviceGetMaxMigDeviceCount = lambda h: 3 if h == 1 else 0

    def handle(h: int, slot: int) -> int:
        if slot == 2:
            raise FakeNVMLError("Not Found")  # an empty slot
        return 100 + slot

    fake.nvmlDeviceGetMigDeviceHandleByIndex = handle
    fake.nvmlDeviceGetUUID = lambda h: instances[h][0] if h in instances else get_uuid(h)
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        used=1024 * MIB, total=instances[h][1]) if h in instances else get_mem(h)
    return fake


def test_mig_instances_are_numbered_and_planned(install, monkeypatch, tiny_model_dir) -> None:
    from chord_core.config import ModelConfig
    from chord_core.runtime.cluster import gpu_inventory, plan_workers
    from chord_core.runtime.parallel_config import ParallelConfig

    _with_migs(install([FakeGpu(uuid=UUID_A), FakeGpu(uuid=UUID_B)]))
    nvml = Nvml(visible_devices=f"{MIG_B},{MIG_A}")
    assert [m.uuid for m in nvml.mig_instances()] == [MIG_A, MIG_B]
    assert nvml.cuda_ordinal_map() == {0: None, 1: 0}  # the GPU holding them: charts label it
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{MIG_B},{MIG_A}")
    inventory, why = gpu_inventory(Nvml())
    assert why == "" and [(g.index, g.uuid) for g in inventory] == [(0, MIG_B), (1, MIG_A)]
    assert inventory[0].free_bytes == 19 * 1024 * MIB
    plan = plan_workers(ModelConfig(model="test"), ParallelConfig(strategy="replicate"),
                        inventory=inventory, parent_visible=f"{MIG_B},{MIG_A}")
    assert [s.visible for s in plan.specs] == [MIG_B, MIG_A]  # one worker per instance
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-unknown")
    assert gpu_inventory(Nvml())[0] == []
