"""``from chord_parallel import MultiGPUPipeline`` — the import path of the original Chord
documents. The code lives in :mod:`chord_core.compat`; this module only names it."""

from __future__ import annotations

from chord_core.compat import MultiGPUPipeline, VideoParallelProcessor
from chord_core.runtime.parallel_config import read_config_dict as load_config

__all__ = ["MultiGPUPipeline", "VideoParallelProcessor", "load_config"]
