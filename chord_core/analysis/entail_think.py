"""Entailment on a Thinking model: reason first, then score the answer word after ``</think>``.

A Thinking checkpoint's first generated token is its reasoning ("So", "Got", "Okay"), never the
answer: on Qwen3-VL-8B-Thinking P("Yes") at the first position is 2e-6 (linzhiqiu/t2v_metrics#41),
so ``entailment._prefill``'s first-token scores mean nothing there. Qwen's own evaluation keeps
the text after ``</think>``. So each (image, statement) row is generated greedily up to
``think_tokens`` new tokens; its reasoning (the text before ``</think>``, or all of it when the
budget ran out, with a warning) is put back after the prompt with the block closed
(``…reasoning\\n</think>\\n\\n``, the Thinking template's own layout), and one more forward
pass scores the answer word at the position where the answer starts. Cost: the reasoning's
decode steps plus a second prefill per batch (``benchmarks/entail.py --thinking`` measures it).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from chord_core.analysis.reasoning import THINK_CLOSE, split_reasoning

if TYPE_CHECKING:
    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

THINK_TOKENS_DEFAULT = 512  # the reasoning budget when a request names none
ANSWER_OPENING = f"\n{THINK_CLOSE}\n\n"


def think_then_score(lm: LoadedModel, prompts: Sequence[str],
                     gen_inputs: Callable[[Sequence[str]], Any],
                     score: Callable[[Sequence[str]], list[Any]],
                     think_tokens: int | Sequence[int] = THINK_TOKENS_DEFAULT,
                     cancel: threading.Event | None = None) -> list[Any]:
    """One batch: generate each row's reasoning after its templated prompt (``prompts``,
    inputs made by ``gen_inputs``), close it, and ``score`` the closed prompts (the entailment
    module's prefill, one for the whole batch). ``think_tokens``: one budget, or each row's.
    A row ends at its own ``</think>`` and the batch once every row has ended (or at the
    largest budget); a row with a smaller budget keeps only that many tokens — what it would
    have reasoned alone under greedy decoding. Each score gets its ``reasoning`` and
    ``reasoning_cut`` (the budget ended it)."""
    from dataclasses import replace

    from chord_core.model import loading as m

    budgets = row_budgets(think_tokens, len(prompts))
    new_ids, _ = m._generate(lm, gen_inputs(prompts), max(budgets), None, cancel,
                             stop_token=close_token(lm))
    texts = lm.processor.batch_decode([row[:b] for row, b in zip(new_ids, budgets)],
                                      skip_special_tokens=True)
    splits = [split_reasoning(t, thinking=True) for t in texts]
    closed = [p + sp.reasoning + ANSWER_OPENING for p, sp in zip(prompts, splits)]
    return [replace(sc, reasoning=sp.reasoning, reasoning_cut=sp.unfinished)
            for sc, sp in zip(score(closed), splits)]


def row_budgets(think_tokens: int | Sequence[int], rows: int) -> list[int]:
    """Each row's reasoning budget (at least 1)."""
    if isinstance(think_tokens, int):
        return [max(1, think_tokens)] * rows
    budgets = [max(1, int(b)) for b in think_tokens]
    if len(budgets) != rows:
        raise ValueError(f"{len(budgets)} reasoning budgets for {rows} rows")
    return budgets


def close_token(lm: LoadedModel) -> int | None:
    """The id of ``</think>`` when the tokenizer has it as one token, else None (the rows
    then reason to their budget and the text is split afterwards)."""
    cached = getattr(lm, "_think_close_id", False)
    if cached is not False:
        return cached
    tok = lm.processor.tokenizer
    ids = tok.encode(THINK_CLOSE, add_special_tokens=False)
    found = int(ids[0]) if len(ids) == 1 else None
    object.__setattr__(lm, "_think_close_id", found)
    return found


def think_warnings(scores: Sequence[Any], think_tokens: int) -> list[str]:
    """One warning when some rows' reasoning hit the budget (their answer was forced)."""
    cut = sum(1 for sc in scores if getattr(sc, "reasoning_cut", False))
    if not cut:
        return []
    return [f"{cut} of {len(scores)} frame(s): the reasoning reached the {think_tokens}-token "
            "budget before </think>; the answer was scored after closing it there (raise "
            "max new tokens for longer reasoning)"]
