"""A Thinking model's answer, split into its reasoning and its final answer (pure).

Qwen3-VL ``*-Thinking`` checkpoints reason before they answer. Their chat template opens the
reasoning block itself (the generation prompt ends ``<|im_start|>assistant\\n<think>\\n``), so
the generated text holds the reasoning, a closing ``</think>`` and the answer, with no
opening tag (QwenLM/Qwen3-VL#1750: "the opening <think> is in the chat template"). Qwen's
own evaluation keeps only the text after ``</think>``; so does Chord: grounding and spans read
only the answer, the reasoning is kept in the result (``Result.reasoning``) and shown folded.

Without a ``</think>`` a Thinking model's text is all reasoning, cut off by the token limit
before it answered (vllm-project/vllm#26902 shows an 8B looping "Wait, no, …" until the limit):
there is no answer to read, and the warning says so instead of reading the musing as one.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
UNFINISHED_WARNING = ("the model was still reasoning when the token limit cut it off (no "
                      "</think>): there is no answer to read; raise max new tokens, a Thinking "
                      "model's limit for its reasoning and answer")


@dataclass(frozen=True)
class SplitAnswer:
    """``answer``: what the parsers read; ``reasoning``: the text before ``</think>``;
    ``unfinished``: the reasoning never closed, so there is no answer."""

    answer: str
    reasoning: str = ""
    unfinished: bool = False


def split_reasoning(text: str, *, thinking: bool = False) -> SplitAnswer:
    """Split ``text`` at its last ``</think>``. ``thinking``: the model's template opened the
    reasoning block, so text without ``</think>`` is unfinished reasoning. An Instruct model's
    text without tags is all answer."""
    text = text if isinstance(text, str) else ""
    if THINK_CLOSE in text:
        head, _, tail = text.rpartition(THINK_CLOSE)
        return SplitAnswer(tail.strip(), _strip_open(head))
    if THINK_OPEN in text:  # the model opened a block itself and never closed it
        head, _, tail = text.partition(THINK_OPEN)
        return SplitAnswer(head.strip(), tail.strip(), unfinished=True)
    if thinking:
        return SplitAnswer("", text.strip(), unfinished=bool(text.strip()))
    return SplitAnswer(text)


def _strip_open(head: str) -> str:
    return head.replace(THINK_OPEN, "", 1).strip()
