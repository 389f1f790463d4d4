"""Entailment on a Thinking model: reason first, then score the answer word after ``</think>``.

A Thinking checkpoint's first generated token is its reasoning ("So", "Got", "Okay"), never the
answer: on Qwen3-VL-8B-Thinking P("Yes") at the first position is 2e-6 (linzhiqiu/t2v_metrics#41),
so ``entailment._prefill``'s first-token scores mean nothing there. Qwen's own evaluation keeps
the text after ``</think>``. So each (image, statement) row is generated greedily up to
``think_tokens`` new tokens; its reasoning (the text before ``</think>``, or all of it when the
budget ran out, with a warning) is followed by the Thinking template's own closing
(``…reasoning\\n</think>\\n\\n``), and the answer word is scored at the position where the
answer starts.

On the fast decoder that score is read from the cache the reasoning left: each row keeps its
own tokens up to its ``</think>`` (then ``\\n\\n`` is fed) or up to its budget or end token
(then ``\\n</think>\\n\\n``): a few decode steps for the batch instead of a second pass over
the prompt and its image. On transformers' ``generate`` (or when the decoder has no room) the
reasoning text is put back after the prompt and one more forward pass scores it.
``benchmarks/thinking.py`` measures the cost against the first token's.
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
                     cancel: threading.Event | None = None,
                     score_logits: Callable[[Any, list[int]], list[Any]] | None = None
                     ) -> list[Any]:
    """One batch: generate each row's reasoning after its templated prompt (``prompts``,
    inputs made by ``gen_inputs``), close it, and ``score`` the closed prompts (the entailment
    module's prefill, one for the whole batch). ``think_tokens``: one budget, or each row's.
    A row ends at its own ``</think>`` and the batch once every row has ended (or at the
    largest budget); a row with a smaller budget keeps only that many tokens — what it would
    have reasoned alone under greedy decoding. Each score gets its ``reasoning`` and
    ``reasoning_cut`` (the budget ended it). ``score_logits(logits, lengths)``: scores from
    next-token logits, for the fast decoder's continuation (the module docstring)."""
    from dataclasses import replace

    from chord_core.model import loading as m

    budgets = row_budgets(think_tokens, len(prompts))
    inputs = gen_inputs(prompts)
    logits = None
    # (a tokenizer without </think> as one token: the text is split afterwards, so the
    # continuation could not tell where a row closed; it keeps the second pass)
    if lm.decoder is not None and score_logits is not None and close_token(lm) is not None:
        plan = _Continuation(lm, budgets)
        new_ids, logits, _ = generate_then_continue(lm, inputs, max(budgets), cancel,
                                                    close_token(lm), plan, RESERVE)
    else:
        new_ids, _ = m._generate(lm, inputs, max(budgets), None, cancel,
                                 stop_token=close_token(lm))
    texts = lm.processor.batch_decode([row[:b] for row, b in zip(new_ids, budgets)],
                                      skip_special_tokens=True)
    splits = [split_reasoning(t, thinking=True) for t in texts]
    if logits is not None and score_logits is not None:
        prompt = inputs["attention_mask"].sum(-1).tolist()
        scores = score_logits(logits, [int(n) + k + len(t) for n, k, t in
                                       zip(prompt, plan.keep, plan.tails)])
    else:
        scores = score([p + sp.reasoning + ANSWER_OPENING for p, sp in zip(prompts, splits)])
    return [replace(sc, reasoning=sp.reasoning, reasoning_cut=sp.unfinished)
            for sc, sp in zip(scores, splits)]


def generate_then_continue(lm: LoadedModel, inputs: Any, max_new_tokens: int,
                           cancel: threading.Event | None, stop_token: int | None,
                           plan: Callable[[Any], tuple[list[int], list[list[int]]]],
                           reserve: int) -> tuple[Any, Any, float]:
    """Greedy generate on the fast decoder, then, in the same hold of the model (another
    request's generate would overwrite the cache), ``plan(new ids)`` → (tokens each row
    keeps, tokens fed after them) and the decoder's ``continue_logits`` from its cache.
    Returns (new ids, those logits [b, V] or None when the decoder could not continue,
    seconds)."""
    from chord_core.model import loading as m

    if lm.decoder is None:
        raise ValueError("continuing from the cache needs the fast decoder")
    decoder, got = lm.decoder, []

    def then(new: Any) -> None:
        m._raise_if_cancelled(cancel)
        logits = decoder.continue_logits(*plan(new))
        got.append(None if logits is None else logits.cpu())

    new, seconds = m._generate(lm, inputs, max_new_tokens, None, cancel, stop_token,
                               reserve=reserve, after=then)
    return new, got[0], seconds


RESERVE = 8  # cache slots the decoder keeps free for the closing tokens (≤ 4 with Qwen's)


class _Continuation:
    """Which of its new tokens each row keeps, and what is fed after them: through its
    ``</think>`` (then the ``\\n\\n`` the template puts after it), else up to its end token
    or its budget (then the whole closing, ``\\n</think>\\n\\n``). Called with the new ids
    inside ``generate_then_continue``; keeps what it decided for the scores' lengths."""

    def __init__(self, lm: LoadedModel, budgets: list[int]) -> None:
        from chord_core.model.loading import _stop_ids

        tok = lm.processor.tokenizer
        self.budgets, self.close = budgets, close_token(lm)
        self.stops = _stop_ids(lm) | ({self.close} if self.close is not None else set())
        self.ends = self.stops - {self.close}
        self.closing = tok.encode(ANSWER_OPENING, add_special_tokens=False)
        self.after_close = tok.encode(ANSWER_OPENING.split(THINK_CLOSE, 1)[1],
                                      add_special_tokens=False)
        self.keep: list[int] = []
        self.tails: list[list[int]] = []

    def __call__(self, new_ids: Any) -> tuple[list[int], list[list[int]]]:
        from chord_core.model.loading import _count_new

        self.keep, self.tails = [], []
        for row, budget in zip(new_ids, self.budgets):
            row = row[:budget]
            n = _count_new(row, self.stops)  # through the first </think> or end token
            last = int(row[n - 1]) if n else None
            closed = last is not None and last == self.close
            self.keep.append(n - 1 if last in self.ends else n)  # an end token is dropped
            self.tails.append(self.after_close if closed else self.closing)
        return self.keep, self.tails


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
