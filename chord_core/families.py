"""The model families Chord runs, in one table: what a checkpoint's ``model_type`` loads as,
how its boxes are written, how it is asked to ground, and whether the fast decoder runs it.

Read by model loading, prompts, the fast decoder, grounding, the job manager (merging chunks
of one grounding job) and the planner. Pure data: importing it loads nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chord_core.errors import ConfigError, ModelError

# Qwen2.5-VL answers in absolute pixels of the resized input image.
_GROUND_PIXELS = (
    'Locate every "{target}" in the image. Output the bounding boxes in JSON format as a '
    'list: [{{"bbox_2d": [x1, y1, x2, y2], "label": "{target}"}}], one entry per instance. '
    'If there is no "{target}" in the image, output [].'
)
# Qwen3-VL reports boxes in 0–1000 coordinates relative to the image, not in pixels.
_GROUND_RELATIVE = (
    'Locate every "{target}" in the image. Output the bounding boxes in JSON format as a '
    'list: [{{"bbox_2d": [x1, y1, x2, y2], "label": "{target}"}}], one entry per instance, '
    "with coordinates relative to the image on a 0-1000 scale. "
    'If there is no "{target}" in the image, output [].'
)


@dataclass(frozen=True)
class Family:
    name: str              # "qwen2.5-vl": what results and the UI call it
    label: str             # "Qwen2.5-VL"
    coords: str            # boxes: "absolute" input pixels, or "relative1000" of the image
    ground_prompt: str     # per-frame grounding instruction, ``{target}`` filled in
    text_timestamps: bool  # a "<t seconds>" text before every frame pair of a video
    # has ``*-Thinking`` checkpoints: reasoning before ``</think>``, then the answer
    thinking: bool = False


@dataclass(frozen=True)
class ModelType:
    """One ``model_type`` of a config.json: its family and transformers class."""

    family: str
    class_name: str
    fast_decoder: bool     # Chord's fast decoder implements its layers (no routed experts)
    # the processor's classes (processor, image, video, tokenizer): imported early, on a
    # thread, while a worker starts (model/preimport.py)
    processor: tuple[str, ...] = ()


_QWEN25_PROCESSOR = ("Qwen2_5_VLProcessor", "Qwen2VLImageProcessor", "Qwen2VLVideoProcessor",
                     "Qwen2Tokenizer")
_QWEN3_PROCESSOR = ("Qwen3VLProcessor", "Qwen2VLImageProcessor", "Qwen3VLVideoProcessor",
                    "Qwen2Tokenizer")
FAMILIES = {
    "qwen2.5-vl": Family("qwen2.5-vl", "Qwen2.5-VL", "absolute", _GROUND_PIXELS, False),
    "qwen3-vl": Family("qwen3-vl", "Qwen3-VL", "relative1000", _GROUND_RELATIVE, True,
                       thinking=True),
}
MODEL_TYPES = {
    "qwen2_5_vl": ModelType("qwen2.5-vl", "Qwen2_5_VLForConditionalGeneration", True,
                            _QWEN25_PROCESSOR),
    "qwen3_vl": ModelType("qwen3-vl", "Qwen3VLForConditionalGeneration", True,
                          _QWEN3_PROCESSOR),
    # MoE text decoder, same vision tower, processor and prompts (every expert is loaded)
    "qwen3_vl_moe": ModelType("qwen3-vl", "Qwen3VLMoeForConditionalGeneration", False,
                              _QWEN3_PROCESSOR),
}
COORD_MODES = tuple(sorted({f.coords for f in FAMILIES.values()}))
DEFAULT_FAMILY = "qwen2.5-vl"


# The Thinking templates end the generation prompt with the opened reasoning block.
_THINK_PROMPT = re.compile(r"assistant(?:\\n|\n)<think>")


def is_thinking(family_name: str, model_id: str, chat_template: str | None) -> bool:
    """Whether a checkpoint of ``family_name`` is a Thinking one: its id ends ``-Thinking``
    (``Qwen/Qwen3-VL-8B-Thinking``, ``test-qwen3-thinking``) or its chat template opens
    ``<think>`` in the generation prompt. Families without Thinking checkpoints: never."""
    fam = FAMILIES.get(family_name)
    if fam is None or not fam.thinking:
        return False
    name = str(model_id).rstrip("/").split("/")[-1].lower()
    return name.endswith("-thinking") or bool(_THINK_PROMPT.search(chat_template or ""))


def family(name: str) -> Family:
    """The family called ``name`` ("qwen2.5-vl", "qwen3-vl")."""
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family {name!r}",
                          hint=f"use one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def model_type(name: str) -> ModelType:
    """The row for a config.json ``model_type``; a clear error for any other model."""
    if name not in MODEL_TYPES:
        raise ModelError(f"unsupported model type {name!r}",
                         hint="use a Qwen2.5-VL or Qwen3-VL checkpoint, e.g. "
                              "Qwen/Qwen2.5-VL-3B-Instruct or Qwen/Qwen3-VL-8B-Instruct")
    return MODEL_TYPES[name]
