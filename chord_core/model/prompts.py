"""Prompt templates, versioned: results record ``PROMPT_VERSION`` so a change is traceable.

Three kinds of request reach the model (entailment prompts live in entailment.py):

* describe — the whole clip as ONE video input plus a free-text instruction;
* spans — two-pass grounding's first pass: the whole clip as one video, asked for the time
  spans in which the target is visible (``spans_prompt``);
* ground — every sampled frame as its OWN image request asking for boxes in the JSON form
  Qwen2.5-VL was trained on: ``[{"bbox_2d": [x1, y1, x2, y2], "label": "..."}]``, ``[]`` when
  the target is absent. Qwen2.5-VL answers in absolute pixels of the image it was given
  (``input_wh``); Qwen3-VL answers in 0–1000 relative coordinates, so its prompt says so and
  the parser is told which convention applies (``LoadedModel.coord_mode``).

``describe_messages`` / ``ground_messages`` return chat ``messages`` in the transformers format;
the processor's chat template turns the ``{"type": "video"}`` / ``{"type": "image"}`` parts
into the vision placeholder tokens.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from chord_core import families
from chord_core.errors import ConfigError

PROMPT_VERSION = "chord-prompts/1"

DEFAULT_DESCRIBE_PROMPT = (
    "Describe this video in detail. First describe the scene and setting. Then list the "
    "people and notable objects, with what they look like. Then describe the actions and "
    "events in the order they happen, giving the approximate time in seconds for each "
    "(for example \"at about 3.5 s, the man opens the door\"). Mention any text visible on "
    "screen. Do not invent details that are not visible."
)

# Two-pass grounding, first pass: the whole clip as one video, asked WHEN the target is
# visible. Qwen3-VL sees a "<t seconds>" text timestamp before every frame pair, so it can
# answer in the clip's own seconds; the spans then pick the frames to ground.
SPANS_PROMPT = (
    'When is "{target}" visible in this video? Answer with every time span in seconds, as a '
    'JSON list: [{{"start": 1.0, "end": 4.5}}]. If "{target}" is never visible, output [].'
)
MAX_TARGET_CHARS = 300


def visible_text(text: str) -> str:
    """``text`` without invisible format characters (zero-width spaces and joiners, BOMs,
    bidi marks: Unicode category Cf): a statement of only those is empty, not a statement."""
    return "".join(c for c in text or "" if unicodedata.category(c) != "Cf")


def clean_target(target: str) -> str:
    """The target as it goes into the prompt: one line, no double quotes (they would
    break the quoted JSON example), not empty (invisible characters do not count), not
    absurdly long."""
    text = re.sub(r"\s+", " ", visible_text(target)).strip().replace('"', "'")
    if not text:
        raise ConfigError("grounding needs a target to look for",
                          hint='say what to find, e.g. "the cyclist in a red helmet"')
    if len(text) > MAX_TARGET_CHARS:
        raise ConfigError(f"target description is too long ({len(text)} characters)",
                          hint=f"describe the target in at most {MAX_TARGET_CHARS} characters")
    return text


def ground_prompt(target: str, family: str = families.DEFAULT_FAMILY) -> str:
    """The grounding instruction for one image, in the coordinate convention of ``family``
    (``families.FAMILIES``)."""
    return families.family(family).ground_prompt.format(target=clean_target(target))


def describe_messages(prompt: str = DEFAULT_DESCRIBE_PROMPT) -> list[dict[str, Any]]:
    """Chat messages for describing one video: the clip first, then the instruction."""
    text = (prompt or "").strip() or DEFAULT_DESCRIBE_PROMPT
    return [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]}]


def ground_messages(target: str, family: str = families.DEFAULT_FAMILY) -> list[dict[str, Any]]:
    """Chat messages for grounding ``target`` in ONE image."""
    return [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": ground_prompt(target, family)}]}]


def spans_prompt(target: str) -> str:
    """The first-pass question of two-pass grounding: when is ``target`` visible?"""
    return SPANS_PROMPT.format(target=clean_target(target))
