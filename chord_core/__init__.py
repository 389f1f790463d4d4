"""chord_core — the Chord engine: describe a video clip, or find a target in it in space and time.

Public API (importing this package is cheap; torch/transformers/OpenCV load on first use)::

    from chord_core import Engine, AnalysisRequest, ModelConfig, SamplingConfig
    engine = Engine(ModelConfig(model="Qwen/Qwen2.5-VL-3B-Instruct"))
    result = engine.analyze(AnalysisRequest("clip.mp4", "ground", "the red car"))
    result.to_dict()   # the chord.result/v1 document

``analyze(path, task, query)`` is the one-shot form; ``plan(path, task)`` probes a clip and
returns its sampling plan without loading a model.
"""

from __future__ import annotations

from chord_core.analysis.engine import Engine, analyze
from chord_core.analysis.request import AnalysisRequest, plan
from chord_core.config import DEFAULT_MODEL, TEST_MODEL, ModelConfig, SamplingConfig
from chord_core.errors import (
    AlreadyRunning,
    BatchStopped,
    ChordError,
    ConfigError,
    DiskFullError,
    DuplicateJob,
    GroupFailed,
    InputError,
    InternalError,
    JobCancelled,
    ModelError,
    ModelNotFoundError,
    OutOfMemory,
    OutputError,
    PlacementError,
    RemoteError,
    ResourceError,
    StoreError,
    VideoError,
    ResumeError,
    WorkerCrashed,
)
from chord_core.types import (
    SCHEMA,
    Detection,
    ModelInfo,
    ProgressEvent,
    Result,
    SamplingPlan,
    Segment,
    Track,
    VideoInfo,
)

__all__ = [
    "AlreadyRunning",
    "RemoteError",
    "OutOfMemory",
    "InternalError",
    "GroupFailed",
    "DuplicateJob",
    "BatchStopped",
    "DEFAULT_MODEL",
    "SCHEMA",
    "TEST_MODEL",
    "AnalysisRequest",
    "ChordError",
    "ConfigError",
    "Detection",
    "DiskFullError",
    "Engine",
    "InputError",
    "JobCancelled",
    "ModelConfig",
    "ModelError",
    "ModelInfo",
    "ModelNotFoundError",
    "OutputError",
    "PlacementError",
    "ResourceError",
    "ProgressEvent",
    "Result",
    "SamplingConfig",
    "SamplingPlan",
    "Segment",
    "StoreError",
    "Track",
    "VideoError",
    "VideoInfo",
    "ResumeError",
    "WorkerCrashed",
    "analyze",
    "plan",
]
