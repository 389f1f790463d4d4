"""A worker-process entry point for the app tests: the real ``workers.worker_main`` with
``Engine.analyze`` switchable at run time between the real tiny model and two stand-ins.

The app's job manager runs analyses in spawned worker processes, where a test's
``monkeypatch`` cannot reach. The tests start the (one, per session) manager with this
function as the workers' target (``chord_core.runtime.executors.worker_main`` patched before the
manager is created); every analysis then reads the file named by ``CHORD_TEST_ENGINE_MODE``:

    real   the tiny random-weight model (default)
    truth  ground-truth boxes of the synthetic clip (``truth_result``), for views with hits
    slow   "works" for up to 60 s reporting frames, until cancelled

Importable without pytest: the worker process imports it by name.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

MODE_ENV = "CHORD_TEST_ENGINE_MODE"
MODES = ("real", "truth", "slow")


def set_mode(mode: str) -> None:
    """Switch what the workers' analyses do (takes effect for the next analysis)."""
    if mode not in MODES:
        raise ValueError(f"unknown engine mode {mode!r}")
    Path(os.environ[MODE_ENV]).write_text(mode)


def current_mode() -> str:
    path = os.environ.get(MODE_ENV)
    if not path or not Path(path).exists():
        return "real"
    return Path(path).read_text().strip() or "real"


def truth_result(request: Any, *, hide: tuple[float, float] = (1.0, 2.0)) -> Any:
    """A grounding Result whose boxes are the synthetic clip's ground truth (the moving
    square), absent between ``hide`` seconds — so views with detections can be checked
    without trained weights (the test model's random output finds nothing)."""
    from chord_core.analysis import grounding as g
    from chord_core.analysis import tracking as tr
    from chord_core.analysis.request import plan
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
    gap = tr.default_max_gap(1.0 / sp.fps)
    dets, tracks = tr.link_tracks(dets, max_gap_s=gap)
    segments = tr.segments_from_tracks(dets, tracks, max_gap_s=gap, duration_s=info.duration_s)
    return Result(task="ground", query=request.query, video=info, sampling=sp,
                  model=ModelInfo(id="truth", dtype="none"), timing=Timing(total_s=0.1),
                  detections=tuple(dets), tracks=tuple(tracks), segments=tuple(segments),
                  raw_outputs=("[]",) * sp.num_frames, created_at="2026-01-01T00:00:00+00:00")


def slow_analysis(on_progress: Any = None, cancel: Any = None) -> Any:
    """Report frames every 0.1 s for up to 60 s; stop when cancelled."""
    from chord_core.errors import JobCancelled
    from chord_core.types import ProgressEvent

    for k in range(600):
        if cancel is not None and cancel.is_set():
            raise JobCancelled("the analysis was cancelled", hint="run it again")
        if on_progress is not None:
            on_progress(ProgressEvent("grounding_frames", f"frame {k}/600", k, 600, k / 10))
        time.sleep(0.1)
    raise RuntimeError("slow analysis was never cancelled")


def _install() -> None:
    from chord_core.analysis.engine import Engine

    real_analyze = Engine.analyze

    def analyze(self: Engine, request: Any, **kwargs: Any) -> Any:
        mode = current_mode()
        if mode == "truth" and request.task == "ground":
            return truth_result(request)
        if mode == "slow":
            return slow_analysis(kwargs.get("on_progress"), kwargs.get("cancel"))
        return real_analyze(self, request, **kwargs)

    Engine.analyze = analyze  # type: ignore[method-assign]


def worker_main(spec: Any, inbox: Any, outbox: Any, control: Any) -> None:
    """Same signature as ``chord_core.runtime.workers.worker_main``."""
    from chord_core.runtime.workers import worker_main as real_worker_main

    _install()
    real_worker_main(spec, inbox, outbox, control)
