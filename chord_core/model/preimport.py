"""The model stack's heavy imports, begun on a thread the moment a worker process starts, so
they run while the kernel reads the weights (``startup.prefetch_weights``) and the worker
sets itself up, instead of inside the load step.

    worker_main ─▶ prefetch weights ─▶ start(model) ┬─ thread: torch, transformers, the
                                                    │  family's model class and processor
                                                    └─ main: process set-up, resolve …
    load_model ─▶ join() ─▶ config, weights (the imports are there by now, or waited for)

On the H200 the load step's own imports took 16.8 s of a cold 22.3 s load (issue 35): the
model class and the processor classes are imported lazily by transformers, on first use,
inside ``from_pretrained``. What the thread imports is what the load would import itself,
for the family the checkpoint's ``config.json`` names (read as plain JSON: no transformers
needed to know which). ``load_model`` joins the thread before it times its own imports, so
its ``imports_s`` step is what was still left to wait for — honest, never hidden. An error in
the thread is raised by the join as the load's error (``ModelError`` with what to do), as if
the load had imported the module itself; a process that never started the thread (tests,
``describe --local``, threads and Ray actors) joins nothing.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
from pathlib import Path

from chord_core import families
from chord_core.errors import ModelError

log = logging.getLogger(__name__)

__all__ = ["EarlyImports", "import_plan", "join", "seconds", "start"]

BASE = ("torch", "transformers", "transformers:AutoProcessor", "transformers:AutoConfig")


class EarlyImports:
    """The imports of ``names`` (``module`` or ``module:attribute``) on a daemon thread;
    ``join`` waits for them and raises what failed as a ModelError. A name in ``optional``
    that fails is only logged: the processor classes (a host without torchvision loads the
    image processor's PIL variant instead, and the load decides that, not this thread)."""

    def __init__(self, names: tuple[str, ...], optional: frozenset[str] = frozenset()
                 ) -> None:
        self.names, self.optional = names, optional
        self.took_s: float | None = None  # the thread's own seconds, once done
        self.failed: tuple[str, BaseException] | None = None
        self._thread = threading.Thread(target=self._run, name="chord-imports", daemon=True)

    def start(self) -> EarlyImports:
        self._thread.start()
        return self

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            for name in self.names:
                module, _, attr = name.partition(":")
                try:
                    mod = importlib.import_module(module)
                    if attr:  # transformers' lazy attribute: imports its module now
                        getattr(mod, attr)
                except AttributeError:  # a class this transformers lacks: the load says so
                    log.info("early import: %s not found; the load will tell", name)
                except BaseException as exc:  # noqa: BLE001 — raised again by join()
                    if name in self.optional:
                        log.info("early import of %s failed (%s); the load will tell",
                                 name, exc)
                        continue
                    self.failed = (name, exc)
                    return
        finally:
            self.took_s = time.perf_counter() - t0

    def join(self) -> None:
        """Wait for the imports; a failed one is raised as the load's ModelError."""
        self._thread.join()
        if self.failed is not None:
            name, exc = self.failed
            raise ModelError(
                f"could not import {name.replace(':', '.')}, which loading the model needs: "
                f"{type(exc).__name__}: {exc}",
                hint="the Python environment is missing a package or has a broken one: "
                     "reinstall with `pip install -r requirements.txt` (offline: from the "
                     "carried wheels), then start Chord again") from exc


_PENDING: EarlyImports | None = None
_LOCK = threading.Lock()


def start(model: str) -> EarlyImports:
    """Begin this process's model imports for ``model`` (once; a second call returns the
    first one's)."""
    global _PENDING
    with _LOCK:
        if _PENDING is None:
            names = import_plan(model)  # BASE, the model class, then the processor's classes
            _PENDING = EarlyImports(names, frozenset(names[len(BASE) + 1:])).start()
        return _PENDING


def join() -> float | None:
    """Wait for this process's early imports, if any were started (raising their error as
    the load's); returns the thread's own seconds (None: none were started)."""
    pending = _PENDING
    if pending is None:
        return None
    pending.join()
    return pending.took_s


def seconds() -> float | None:
    """How long this process's early imports took on their thread (None: not started or
    not done)."""
    pending = _PENDING
    return None if pending is None else pending.took_s


def import_plan(model: str) -> tuple[str, ...]:
    """What loading ``model`` imports: torch, transformers and, when its ``config.json`` is
    on this machine, its family's model class and processor classes."""
    row = families.MODEL_TYPES.get(_model_type(model) or "")
    if row is None:
        return BASE
    return BASE + tuple(f"transformers:{name}" for name in (row.class_name, *row.processor))


def _model_type(model: str) -> str | None:
    """The ``model_type`` in ``model``'s local config.json (None: not on this machine)."""
    from chord_core.model.hub import config_file

    path = config_file(model)
    if path is None:
        return None
    try:
        value = json.loads(Path(path).read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
