"""Real NVML readings on an NVIDIA machine (skipped elsewhere).

Prints what it read (and writes it to ``$OUT/gpu_sampler.json`` when OUT is set) so the
numbers can be quoted: names, memory, and utilisation idle vs. under a matmul loop on cuda:0.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from chord_core.gpus.nvml import GpuSample, Nvml
from chord_core.gpus.sampler import GpuSampler

pytestmark = pytest.mark.gpu

LOAD_S = 3.0
INTERVAL_S = 0.2


@pytest.fixture(scope="module")
def nvml() -> Iterator[Nvml]:
    owner = Nvml()
    if not owner.available:
        pytest.skip(f"no NVIDIA GPU telemetry here: {owner.reason}")
    yield owner
    owner.close()


def _report(name: str, data: dict[str, Any]) -> None:
    print(f"\n[{name}] " + json.dumps(data, indent=1))
    out = os.environ.get("OUT")
    if out:
        path = Path(out) / "gpu_sampler.json"
        existing = json.loads(path.read_text()) if path.exists() else {}
        existing[name] = data
        path.write_text(json.dumps(existing, indent=1))


def test_real_readings(nvml: Nvml) -> None:
    samples = nvml.sample_all()
    _report("snapshot", {"reason": nvml.reason, "samples": [s.to_dict() for s in samples]})
    assert len(samples) == nvml.device_count() > 0
    for s in samples:
        assert "NVIDIA" in s.name, s.name
        assert s.uuid.startswith(("GPU-", "MIG-")), s.uuid
        assert s.memory_total_mib is not None and s.memory_total_mib > 0
        assert s.memory_used_mib is not None and 0 <= s.memory_used_mib <= s.memory_total_mib
        assert s.utilization_pct is None or 0 <= s.utilization_pct <= 100
    assert sorted(s.index for s in samples) == list(range(len(samples)))


def _matmul_loop(torch: Any, seconds: float) -> int:
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    iterations = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            a = (a @ b) * 1e-4
        torch.cuda.synchronize()
        iterations += 20
    return iterations


def _cuda0(samples: list[GpuSample]) -> GpuSample:
    [s] = [s for s in samples if s.cuda_ordinal == 0]
    return s


def test_utilisation_rises_under_matmul(nvml: Nvml) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    sampler = GpuSampler(interval_s=INTERVAL_S, history_s=60.0, nvml=nvml)
    sampler.start()
    try:
        time.sleep(1.0)
        load_start = time.time()
        iterations = _matmul_loop(torch, LOAD_S)
        load_end = time.time()
        time.sleep(2 * INTERVAL_S)
    finally:
        sampler.stop()
    index = _cuda0(sampler.latest()).index
    series = sampler.history()[index]
    idle = [s.utilization_pct for s in series if s.t < load_start and s.utilization_pct is not None]
    busy = [s.utilization_pct for s in series if load_start + 0.5 <= s.t <= load_end]
    mem_idle = max(s.memory_used_mib for s in series if s.t < load_start)
    mem_busy = max(s.memory_used_mib for s in series if load_start <= s.t <= load_end)
    last_busy = [s for s in series if s.t <= load_end][-1]
    props_uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    _report("matmul", {
        "gpu": series[-1].name, "nvml_index": index, "cuda_ordinal": 0,
        "uuid_nvml": series[-1].uuid, "uuid_torch": None if props_uuid is None else str(props_uuid),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "interval_s": INTERVAL_S, "load_s": LOAD_S, "matmuls": iterations,
        "samples": len(series), "util_idle_pct": idle, "util_busy_pct": busy,
        "mem_idle_mib": mem_idle, "mem_busy_mib": mem_busy,
        "power_w_last": [s.power_w for s in series[-5:]],
        "temperature_c_last": series[-1].temperature_c,
        "processes_busy": [p.to_dict() for p in last_busy.processes],
        "system_samples": len(sampler.system_history()),
        "cpu_pct_last": sampler.system_history()[-1].cpu_pct,
    })
    if props_uuid is not None:  # NVML index ↔ CUDA ordinal mapping agrees with CUDA itself
        assert series[-1].uuid.lower().endswith(str(props_uuid).lower())
    assert len(busy) >= int(LOAD_S / INTERVAL_S) // 2, "sampler did not keep its interval"
    assert None not in busy and max(busy) >= 50, busy
    assert max(busy) > (sum(idle) / len(idle) if idle else 0.0)
    assert mem_busy > mem_idle
