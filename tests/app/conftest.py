"""Fixtures for the Streamlit AppTest tests: the test model, temp data dirs, a clip, polling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
RESULT_TIMEOUT_S = 240.0


@pytest.fixture()
def app_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """CHORD_MODEL=test, a per-test data dir and one model cache for the module."""
    cache = tmp_path_factory.getbasetemp() / "app-cache"
    cache.mkdir(exist_ok=True)
    data = tmp_path / "data"
    monkeypatch.setenv("CHORD_MODEL", "test")
    monkeypatch.setenv("CHORD_CACHE_DIR", str(cache))
    monkeypatch.setenv("CHORD_DATA_DIR", str(data))
    monkeypatch.chdir(ROOT)
    return {"cache": cache, "data": data}


@pytest.fixture(scope="session")
def app_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-second synthetic H.264 clip (moving green square), made once for the session."""
    from chord_core.testing.videos import make_video

    path = tmp_path_factory.mktemp("app-clips") / "square.mp4"
    make_video(path, duration_s=3.0, fps=10.0, size_wh=(320, 240))
    return path


@pytest.fixture()
def new_app(app_env: dict[str, Path]) -> Callable[[], object]:
    """Factory: a fresh AppTest of app.py (the Analyze page is the default)."""
    from streamlit.testing.v1 import AppTest

    def make() -> AppTest:
        return AppTest.from_file(APP, default_timeout=120)

    return make


@pytest.fixture()
def poll() -> Callable[..., object]:
    """``poll(at, done, timeout=…)``: see ``poll_app``."""
    return poll_app


def poll_app(at: object, done: Callable[[object], bool], timeout: float = RESULT_TIMEOUT_S,
             every: float = 0.5) -> object:
    """Rerun ``at`` until ``done(at)`` holds — AppTest runs scripts synchronously, so the
    runner's worker thread finishes between reruns. Fails with what the page last showed."""
    deadline = time.monotonic() + timeout
    while True:
        at.run()
        if at.exception:
            pytest.fail(f"page raised: {[e.value for e in at.exception]}")
        if done(at):
            return at
        if time.monotonic() > deadline:
            shown = [m.value for m in at.markdown] + [e.value for e in at.error]
            pytest.fail(f"timed out after {timeout} s; page showed: {shown[-12:]}")
        time.sleep(every)


def truth_result(request: object, *, hide: tuple[float, float] = (1.0, 2.0)) -> object:
    """A grounding Result whose boxes are the synthetic clip's ground truth (the moving
    square), absent between ``hide`` seconds — so views with detections can be checked
    without trained weights (the test model's random output finds nothing)."""
    from chord_core import grounding as g
    from chord_core.engine import plan
    from chord_core.testing.videos import _square_px
    from chord_core.types import ModelInfo, Result, Timing

    info, sp = plan(request.video_path, "ground", request.sampling)
    dets = []
    for idx, t in zip(sp.frame_indices, sp.timestamps_s):
        if hide[0] <= t < hide[1]:
            continue
        x1, y1, x2, y2 = _square_px(idx, info.frame_count, info.size_wh)
        w, h = info.size_wh
        box = g.ParsedBox((x1 / w, y1 / h, x2 / w, y2 / h), label=request.query)
        dets.append(g.to_detection(box, info.size_wh, t_s=t, frame_index=idx))
    gap = g.default_max_gap(1.0 / sp.fps)
    dets, tracks = g.link_tracks(dets, max_gap_s=gap)
    segments = g.segments_from_tracks(dets, tracks, max_gap_s=gap, duration_s=info.duration_s)
    return Result(task="ground", query=request.query, video=info, sampling=sp,
                  model=ModelInfo(id="truth", dtype="none"), timing=Timing(total_s=0.1),
                  detections=tuple(dets), tracks=tuple(tracks), segments=tuple(segments),
                  raw_outputs=("[]",) * sp.num_frames, created_at="2026-01-01T00:00:00+00:00")


@pytest.fixture()
def truth() -> Callable[..., object]:
    """``truth(request)`` → the ground-truth Result ``truth_engine`` answers with."""
    return truth_result


@pytest.fixture()
def truth_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every Engine answer grounding requests with the clip's ground truth."""
    from chord_core.engine import Engine

    def analyze(self: Engine, request: object, **_: object) -> object:
        return truth_result(request)

    monkeypatch.setattr(Engine, "analyze", analyze)
    monkeypatch.setattr(Engine, "load", lambda self: None)


@pytest.fixture()
def slow_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every Engine 'work' for up to 60 s, reporting frames, until cancelled."""
    from chord_core.engine import Engine
    from chord_core.errors import JobCancelled
    from chord_core.types import ProgressEvent

    def analyze(self: Engine, request: object, *, on_progress=None, cancel=None) -> object:
        for k in range(600):
            if cancel is not None and cancel.is_set():
                raise JobCancelled("the analysis was cancelled", hint="run it again")
            if on_progress is not None:
                on_progress(ProgressEvent("grounding_frames", f"frame {k}/600", k, 600, k / 10))
            time.sleep(0.1)
        raise AssertionError("slow_engine was never cancelled")

    monkeypatch.setattr(Engine, "analyze", analyze)
    monkeypatch.setattr(Engine, "load", lambda self: None)
