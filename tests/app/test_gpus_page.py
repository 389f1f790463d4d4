"""AppTest tests of the GPUs page: the real sampler here (no NVIDIA GPU), and a fake one with
GPUs to check the table, process list and charts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from chord_core.gpus.nvml import GpuSample, ProcessInfo, SystemSample


def _gpu(index: int, t: float, util: float, used: float, procs: int = 0,
         job: str | None = None) -> GpuSample:
    return GpuSample(t=t, index=index, cuda_ordinal=index, name="NVIDIA H200",
                     uuid=f"GPU-{index}", utilization_pct=util, memory_used_mib=used,
                     memory_total_mib=143_771.0, temperature_c=40.0 + index, power_w=120.0,
                     power_limit_w=700.0, job=job,
                     processes=tuple(ProcessInfo(pid=1000 + i, used_memory_mib=2048.0,
                                                 name="python") for i in range(procs)))


@dataclass
class FakeSampler:
    """Stands in for chord_core.gpus.sampler.GpuSampler (same read API)."""

    gpus: int = 2
    available: bool = True
    reason: str = ""
    history_s: float = 300.0
    now: float = field(default_factory=time.time)

    def _at(self, t: float) -> list[GpuSample]:
        return [_gpu(i, t, util=10.0 * (i + 1), used=1024.0 * (i + 1), procs=i,
                     job="job-00001" if i == 1 else None) for i in range(self.gpus)]

    def latest(self) -> list[GpuSample]:
        return self._at(self.now) if self.available else []

    def history(self) -> dict[int, list[GpuSample]]:
        if not self.available:
            return {}
        ticks = [self.now - s for s in (30, 20, 10, 0)]
        return {i: [self._at(t)[i] for t in ticks] for i in range(self.gpus)}

    def system_latest(self) -> SystemSample:
        return SystemSample(t=self.now, cpu_pct=37.0, ram_used_mib=4096.0, ram_total_mib=16384.0)

    def system_history(self) -> list[SystemSample]:
        return [SystemSample(t=self.now - s, cpu_pct=30.0 + s, ram_used_mib=4096.0,
                             ram_total_mib=16384.0) for s in (20, 10, 0)]


def _gpus_page(new_app):
    at = new_app()
    at.run()
    return at.switch_page("views/gpus.py").run()


@pytest.fixture()
def fake_sampler(monkeypatch: pytest.MonkeyPatch) -> FakeSampler:
    from chord_ui import resources

    sampler = FakeSampler()
    monkeypatch.setattr(resources, "gpu_sampler", lambda: sampler)
    return sampler


def test_navigation_has_exactly_analyze_and_gpus(new_app) -> None:
    at = new_app().run()
    assert not at.exception
    assert at.title[0].value == "Analyze a clip"  # Analyze is the default page
    at.switch_page("views/gpus.py").run()
    assert not at.exception
    assert at.title[0].value == "GPUs"
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "coming soon" not in text.lower()


def test_without_gpu_says_why_and_charts_cpu_ram(new_app) -> None:
    from chord_ui import resources

    sampler = resources.gpu_sampler()
    if sampler.available:
        pytest.skip("this machine has an NVIDIA GPU")
    deadline = time.monotonic() + 10
    while sampler.system_latest() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    at = _gpus_page(new_app)
    assert not at.exception
    info = at.info[0].value
    assert "No NVIDIA GPU" in info and sampler.reason in info
    assert [m.label for m in at.metric] == ["CPU", "RAM"]
    assert len(at.get("plotly_chart")) == 2


@pytest.mark.parametrize("gpus", [1, 4], ids=["one-gpu", "four-gpus"])
def test_with_gpus_table_processes_and_charts(new_app, fake_sampler: FakeSampler,
                                              gpus: int) -> None:
    fake_sampler.gpus = gpus
    at = _gpus_page(new_app)
    assert not at.exception
    assert not at.info
    table = at.dataframe[0].value
    assert list(table["GPU"]) == list(range(gpus))
    assert list(table["utilisation %"]) == [10.0 * (i + 1) for i in range(gpus)]
    assert table["memory"][0] == "1.0 / 140 GiB"
    assert table["power"][0] == "120 / 700 W"
    if gpus > 1:
        assert table["job"][1] == "job-00001"
        procs = at.dataframe[1].value
        assert len(procs) == sum(range(gpus)) and set(procs["process"]) == {"python"}
    else:
        assert any("No compute processes" in c.value for c in at.caption)
    charts = at.get("plotly_chart")
    assert len(charts) == 4 + 2  # utilisation, memory, temperature, power + host CPU, RAM
