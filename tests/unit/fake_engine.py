"""The engine at the worker's boundary, for tests only: a fake that "loads" at once and
whose ``analyze`` a test writes (``runtime.executors.ThreadExecutor(engine_factory=…)``
runs it in the real worker loop, beside the real manager)."""

from __future__ import annotations

from types import SimpleNamespace

from chord_core.config import ModelConfig
from chord_core.types import ModelInfo


class LoadedEngine:
    """Loads nothing and is ready at once; subclasses give ``analyze``."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.model_cfg = cfg
        self.model_info = ModelInfo(id=cfg.model, dtype="float32")

    def load(self) -> SimpleNamespace:
        return SimpleNamespace(load_s=0.0, phases={})

    def unload(self) -> None:
        pass
