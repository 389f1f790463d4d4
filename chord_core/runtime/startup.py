"""A worker's start: load the start-up model, warm it up as ``CHORD_WARMUP`` says, and say
what it is doing while it does (``Warming`` messages: ``/health`` and the app show them).

    imports ─▶ loading the model ─▶ warm-up steps (analysis/warmup.py) ─▶ Ready
      └ thread ─┘ (joined)          └─ lazy: Ready ─▶ warm-up steps between requests

The split Ready carries (``/health``'s ``startup``): ``imports_s`` from the process's start
to the load step (torch, waited for on the main thread); ``early_imports_s``, the import
thread's own seconds (torch, transformers, the family's model and processor classes:
``model/preimport.py``), which ran beside it; ``load_imports_s``, what the load step still
had to wait for of them (near zero once the thread was done); then the load's other steps
(``load_weights_s`` …) and the warm-up's (``warmup_*``).

Modes: ``auto`` (the default: GPU workers warm up before they say ready, CPU workers do not —
they have no graphs to capture), ``full``, ``lazy`` (ready as soon as the model is loaded;
the warm-up steps run while the worker has nothing queued, one at a time, so a request waits
at most for the step in hand and captures only the shapes it needs itself) and ``off``.

How long is left comes from the last start of the same model, devices, mode and warmed-up
tasks on this machine (a small JSON file under the Chord cache); the first start has no
estimate (None).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Mapping

from chord_core.analysis.request import TASKS
from chord_core.config import env_value, warmup_mode
from chord_core.errors import ChordError, ConfigError
from chord_core.model.bytecode import bytecode_cache, bytecode_valid
from chord_core.runtime.messages import Ready, Warming

if TYPE_CHECKING:
    from chord_core.runtime.protocols import EngineFactory, WorkerEngine

WorkerSpec = Any  # runtime.workers.WorkerSpec (which imports this module)

log = logging.getLogger(__name__)
__all__ = ["StartReport", "background_step", "bytecode_cache", "bytecode_valid", "idle",
           "prefetch_weights", "resolve_mode", "served_tasks", "start_engine", "warmup_tasks"]


class StartReport:
    """Sends the worker's start-up step to the manager, with the time left when the last
    start (same key) says how long the whole start took."""

    def __init__(self, spec: WorkerSpec, outbox: Any, t0: float, mode: str) -> None:
        self.spec, self.outbox, self.t0, self.mode = spec, outbox, t0, mode
        self.background = False
        self.last = _read_history(self._file())
        self.startup: dict[str, float] = {}  # this start's split, as Ready carried it

    def _file(self) -> Any:
        from chord_core.config import default_cache_dir

        where = "cpu" if self.spec.is_cpu else f"gpu{len(self.spec.devices)}"
        key = f"{self.spec.model_cfg.model}|{where}|{self.mode}|{','.join(served_tasks())}"
        return default_cache_dir() / "startup" / (
            hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")

    def step(self, detail: str, done: int | None = None, total: int | None = None) -> None:
        elapsed = time.perf_counter() - self.t0
        if self.background:  # against the last background warm-up, from this ready
            last, spent = self.last.get("warmup_total_s"), elapsed - self.startup["ready_s"]
        else:
            last, spent = self.last.get("total_s"), elapsed
        left = None if last is None else round(max(0.0, float(last) - spent), 1)
        self.outbox.put(Warming(self.spec.worker_id, {
            "step": detail.split(":")[0], "detail": detail, "elapsed_s": round(elapsed, 1),
            "left_s": left, "done": done, "total": total, "background": self.background}))

    def save(self, startup: dict[str, float]) -> None:
        """Remember this start's split for the next start's estimate."""
        path = self._file()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(startup))
            os.replace(tmp, path)
        except OSError as exc:  # an estimate is a nicety: never a reason to fail a start
            log.info("could not keep the start-up times in %s (%s)", path, exc)


def _read_history(path: Any) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def warmup_tasks(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The tasks workers warm up for (``CHORD_WARMUP_TASKS``, ``serve --warmup-tasks``), in
    TASKS order; unset or empty: all of them (every task the service's routes and the app's
    pages run). An unknown name: ConfigError naming the known ones."""
    raw = env_value("CHORD_WARMUP_TASKS", env) or ""
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = sorted(names - set(TASKS))
    if unknown:
        raise ConfigError(f"CHORD_WARMUP_TASKS names unknown task(s) {', '.join(unknown)}",
                          hint=f"use some of: {','.join(TASKS)} (unset: all)")
    return tuple(t for t in TASKS if t in names) if names else TASKS


def served_tasks() -> tuple[str, ...]:
    """The tasks this worker warms up for (``CHORD_WARMUP_TASKS``; ``serve`` refuses a bad
    value before any worker starts, a worker started otherwise warms up for all of them)."""
    try:
        return warmup_tasks()
    except ConfigError as exc:
        log.warning("%s (%s); warming up for every task", exc.message, exc.hint)
        return TASKS


def resolve_mode(spec: WorkerSpec) -> str:
    """The warm-up this worker runs: full, lazy or off."""
    if not spec.warmup:
        return "off"
    mode = warmup_mode()
    if mode == "auto":
        return "off" if spec.is_cpu else "full"
    return mode


def start_engine(spec: WorkerSpec, outbox: Any, t0: float, factory: EngineFactory,
                 model_cfg: Any) -> tuple[WorkerEngine | None, list[Any], StartReport]:
    """Load the start-up model and warm it up (mode ``resolve_mode``), then tell the manager
    — with where the start-up time went (seconds per step, ``total_s`` since the process
    began its work). ``model_cfg``: the engine's (the worker's placement applied). Returns
    (the engine or None when the model could not be loaded, the
    warm-up steps left for the background, the reporter)."""
    mode = resolve_mode(spec)
    report = StartReport(spec, outbox, t0, mode)
    startup: dict[str, float] = {"imports_s": time.perf_counter() - t0}
    report.step("loading the model: weights, processor, fast decoder")
    engine = factory(model_cfg)
    try:
        lm = engine.load()
    except ChordError as exc:
        # The worker stays up: jobs that name another model (e.g. the test model, or one
        # downloaded later) can still run here; jobs for this model fail with this error.
        outbox.put(Ready(spec.worker_id, None, exc.to_dict(), startup))
        return None, [], report
    startup["load_s"] = lm.load_s
    startup.update({f"load_{k}": v for k, v in lm.phases.items()})
    from chord_core.model import preimport

    early = preimport.seconds()
    if early is not None:  # the imports' own time on their thread, beside imports_s
        startup["early_imports_s"] = early
    tasks = served_tasks()  # the served tasks' shapes only
    steps = _steps(engine, tasks) if mode != "off" else []
    if mode == "full":
        try:
            startup.update({f"warmup_{k}": v for k, v in engine.warmup(
                on_step=report.step, tasks=tasks).items()})
        except Exception as exc:  # noqa: BLE001 — a failed warm-up only costs speed later
            log.warning("warm-up failed (%s); the first request will be slower", exc)
        steps = []
    startup["total_s"] = startup["ready_s"] = time.perf_counter() - t0
    log.info("ready in %.1f s (imports %.1f, load %.1f of which imports %.1f, warm-up "
             "%.1f%s)", startup["total_s"], startup["imports_s"], startup["load_s"],
             startup.get("load_imports_s", 0.0), startup.get("warmup_total_s", 0.0),
             ", the rest in the background" if steps else "")
    report.startup = startup
    if steps:
        report.background = True
        startup["warmup_background"] = 1.0
        report.step(f"{steps[0].detail} (in the background)", None, None)
    else:
        report.save(startup)
    info = engine.model_info
    outbox.put(Ready(spec.worker_id, info.to_dict() if info is not None else None, None,
                     startup))
    report.startup = startup
    return engine, steps, report


def _steps(engine: WorkerEngine, tasks: tuple[str, ...]) -> list[Any]:
    """The warm-up for ``tasks`` as separate steps (an engine without them: one step, its
    warmup())."""
    from chord_core.analysis.warmup import WarmStep

    steps = getattr(engine, "warmup_steps", None)
    if steps is None:
        def whole(_: Any) -> None:
            engine.warmup(tasks=tasks)

        return [WarmStep("total_s", "warm-up", whole)]
    return list(steps(tasks))


def idle(inbox: Any) -> bool:
    """Nothing waits in the worker's inbox (a queue without ``empty``: never idle)."""
    try:
        return bool(inbox.empty())
    except (AttributeError, NotImplementedError, OSError):
        return False


def background_step(engine: WorkerEngine, steps: list[Any], report: StartReport) -> list[Any]:
    """Run the next background warm-up step; returns the steps left. After the last one the
    manager gets the warm-up's split (and ``/health`` stops saying it is warming)."""
    step, rest = steps[0], steps[1:]
    startup = report.startup
    t = time.perf_counter()
    try:
        step.run(lambda done, total: report.step(f"{step.detail} (in the background)",
                                                 done, total))
    except Exception as exc:  # noqa: BLE001 — a failed warm-up only costs speed later
        log.warning("background warm-up step failed (%s); requests capture their own", exc)
        rest = []
    startup[f"warmup_{step.name}"] = time.perf_counter() - t
    if rest:
        report.step(f"{rest[0].detail} (in the background)")
        return rest
    from chord_core.analysis.warmup import finish_stats

    lm = engine.load()
    startup.update({f"warmup_{k}": v for k, v in finish_stats(lm).items()})
    startup["warmup_total_s"] = time.perf_counter() - report.t0 - startup["ready_s"]
    startup["total_s"] = time.perf_counter() - report.t0
    report.save(startup)
    report.outbox.put(Warming(report.spec.worker_id, {"startup": dict(startup)}))
    log.info("background warm-up done in %.1f s", startup["warmup_total_s"])
    return rest


def prefetch_weights(model: str) -> int:
    """Ask the kernel to read the checkpoint's safetensors files into the page cache now
    (``posix_fadvise`` WILLNEED: it returns at once, the disk works while the worker imports
    torch and transformers). A test model, a local folder or a hub model already in the hub
    cache; anything else, or a system without fadvise: nothing. Returns the bytes asked for."""
    from chord_core.model.hub import config_file

    config = config_file(model)
    if not hasattr(os, "posix_fadvise") or config is None:
        return 0
    asked = 0
    for path in config.parent.rglob("*.safetensors"):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            asked += os.fstat(fd).st_size
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked
