"""Visual entailment: does an image (or a clip's frames) show that a statement is true?

One prefill per image, no sampling and no decode loop: the model reads the image and the
question, and the probability of each answer word at the next-token position gives the label's
probability. The question asks for ``yes`` / ``no`` / ``maybe``, the words OFA-VE answers with;
they map to ``entailment`` / ``contradiction`` / ``neutral``. Each label's probability is the sum
over its word's spellings ("yes", "Yes", …), renormalised over the three labels;
``answer_mass`` says how much of the model's next-token probability went to them at all (a
trained model puts nearly all of it there; the random test model does not).

A clip is scored frame by frame (``Entailment`` keeps the curve); the verdict rule is in
``summarise``. Grounding scores each detection the same way on the box's crop.

A Thinking model (``ModelInfo.thinking``) reasons before it answers, so its first token is not
the answer: it generates its reasoning first and is scored after ``</think>``
(``entail_think.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from chord_core.errors import ConfigError
from chord_core.threads import Pool
from chord_core.types import EntailFrame, Entailment

if TYPE_CHECKING:
    import numpy as np

    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

LABELS = ("entailment", "neutral", "contradiction")
ANSWER_WORDS = {"entailment": "yes", "neutral": "maybe", "contradiction": "no"}
# The answer opens the assistant's turn, so no leading space; Qwen's tokenizer has each of
# these as one token (a character-level test tokenizer gives their first letters).
_SPELLINGS = {"yes": ("yes", "Yes"), "maybe": ("maybe", "Maybe"), "no": ("no", "No")}
_ALIASES = {"yes": "entailment", "entailment": "entailment", "entails": "entailment",
            "true": "entailment", "maybe": "neutral", "neutral": "neutral",
            "unknown": "neutral", "no": "contradiction", "contradiction": "contradiction",
            "false": "contradiction"}
MAX_STATEMENT_CHARS = 1000

ENTAIL_PROMPT = (
    'Statement: "{statement}"\n'
    "Does the image show that the statement is true? Answer with one word: yes if the image "
    "shows it is true, no if the image shows it is false, maybe if the image does not show "
    "enough to tell."
)


def normalise_label(text: str) -> str:
    """``yes``/``maybe``/``no`` (OFA-VE) or the label names → entailment/neutral/contradiction."""
    key = (text or "").strip().lower()
    if key not in _ALIASES:
        raise ConfigError(f"unknown entailment label {text!r}",
                          hint="use entailment, neutral or contradiction (or yes, maybe, no)")
    return _ALIASES[key]


def clean_statement(statement: str) -> str:
    """The statement as it goes into the prompt: one line, single quotes, not empty
    (zero-width characters alone are refused like an empty statement), not too long."""
    from chord_core.model.prompts import visible_text

    text = " ".join(visible_text(statement).split()).replace('"', "'")
    if not text:
        raise ConfigError("visual entailment needs a statement to check",
                          hint='say what should be true, e.g. "a person opens the car door"')
    if len(text) > MAX_STATEMENT_CHARS:
        raise ConfigError(f"the statement is too long ({len(text)} characters)",
                          hint=f"keep it under {MAX_STATEMENT_CHARS} characters")
    return text


def entail_messages(statement: str) -> list[dict[str, Any]]:
    """Chat messages for one image + the entailment question."""
    text = ENTAIL_PROMPT.format(statement=clean_statement(statement))
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]


@dataclass(frozen=True)
class EntailScore:
    """One image's answer: a probability per label (summing to 1) and the share of the
    next-token probability the answer words had."""

    probabilities: dict[str, float]
    answer_mass: float
    prompt_tokens: int = 0
    reasoning: str = ""  # a Thinking model: what it reasoned before the scored answer
    reasoning_cut: bool = False  # ... and the token budget ended it (the answer was forced)

    @property
    def label(self) -> str:
        return max(LABELS, key=lambda k: self.probabilities[k])


def answer_token_ids(tokenizer: Any) -> dict[str, list[int]]:
    """Per label, the first token of each spelling of its answer word (deduplicated)."""
    out: dict[str, list[int]] = {}
    for label, word in ANSWER_WORDS.items():
        ids = []
        for spelling in _SPELLINGS[word]:
            tokens = tokenizer.encode(spelling, add_special_tokens=False)
            if tokens and tokens[0] not in ids:
                ids.append(int(tokens[0]))
        out[label] = ids
    taken = [i for ids in out.values() for i in ids]
    if len(taken) != len(set(taken)):  # a tokenizer that merges the words cannot tell them
        raise ConfigError("the tokenizer gives the answer words a common first token",
                          hint="this model family is not supported for entailment")
    return out


def score_images(lm: LoadedModel, images: Sequence[np.ndarray], statements: Sequence[str], *,
                 batch_size: int = 16, cancel: threading.Event | None = None,
                 on_batch: Callable[[int, int], None] | None = None,
                 think_tokens: int | None = None
                 ) -> tuple[list[EntailScore], float, float]:
    """Score each (image, statement) pair; returns (scores, preprocess s, model s)."""
    if len(images) != len(statements):
        raise ConfigError(f"{len(images)} images but {len(statements)} statements",
                          hint="pass one statement per image")
    step = max(1, batch_size)
    batches = ((images[s:s + step], statements[s:s + step])
               for s in range(0, len(images), step))
    return score_batches(lm, batches, total=len(images), cancel=cancel, on_batch=on_batch,
                         think_tokens=think_tokens)


def score_batches(lm: LoadedModel, batches: Iterable[tuple[Sequence[Any], ...]],
                  *, total: int = 0, cancel: threading.Event | None = None,
                  on_batch: Callable[[int, int], None] | None = None,
                  think_tokens: int | None = None
                  ) -> tuple[list[EntailScore], float, float]:
    """Score batches of (images, statements), one forward pass each, while a thread builds
    the next batch's inputs (and pulls it from ``batches``, which may still be reading
    frames): the GPU does not wait for the CPU between passes. Returns (scores, seconds spent
    building inputs — overlapped with the passes —, seconds in the passes). A Thinking model
    reasons first (up to ``think_tokens``, or each row's own budget where a batch carries a
    third list of them; ``entail_think.py``)."""
    from chord_core.analysis.entail_think import THINK_TOKENS_DEFAULT
    from chord_core.model.loading import _raise_if_cancelled

    it = iter(batches)
    thinking = bool(getattr(lm.info, "thinking", False))

    def build() -> tuple[Any, float]:
        part = next(it, None)
        if part is None:
            return None, 0.0
        t = time.perf_counter()
        if thinking:  # the prompts and the reasoning's inputs; the budgets ride along
            prompts = _prompts(lm, part[1])
            return (part, prompts, _device_inputs(lm, part[0], prompts)), \
                time.perf_counter() - t
        return _inputs(lm, part[0], part[1]), time.perf_counter() - t  # budgets: thinking only

    scores: list[EntailScore] = []
    pre_s = run_s = 0.0
    with Pool(1, thread_name_prefix="chord-entail-inputs") as pool:
        upcoming = pool.submit(build)
        while True:
            inputs, built_s = upcoming.result()
            if inputs is None:
                break
            _raise_if_cancelled(cancel)
            upcoming = pool.submit(build)
            t = time.perf_counter()
            if thinking:
                part, prompts, gen = inputs
                budget = think_tokens or THINK_TOKENS_DEFAULT
                rows = part[2] if len(part) > 2 else [budget] * len(part[0])
                scores.extend(_think(lm, part[:2], prompts, gen, [r or budget for r in rows],
                                     cancel))
            else:
                scores.extend(_prefill(lm, inputs))
            pre_s, run_s = pre_s + built_s, run_s + time.perf_counter() - t
            if on_batch:
                on_batch(len(scores), max(total, len(scores)))
    return scores, pre_s, run_s


def _prompts(lm: LoadedModel, statements: Sequence[str]) -> list[str]:
    return [lm.processor.apply_chat_template(entail_messages(s), tokenize=False,
                                             add_generation_prompt=True) for s in statements]


def _think(lm: LoadedModel, part: tuple[Sequence[Any], ...], prompts: list[str], gen: Any,
           think_tokens: int | Sequence[int], cancel: threading.Event | None
           ) -> list[EntailScore]:
    """A Thinking model's batch (``entail_think.think_then_score``), its reasoning's inputs
    ``gen`` built ahead."""
    from chord_core.analysis.entail_think import think_then_score

    images, statements = part
    return think_then_score(
        lm, prompts, lambda texts: gen,
        lambda texts: _prefill(lm, _inputs(lm, images, statements, texts=texts)),
        think_tokens, cancel, score_logits=lambda logits, n: _scores(lm, logits, n))


def _inputs(lm: LoadedModel, images: Sequence[np.ndarray], statements: Sequence[str], *,
            texts: Sequence[str] | None = None) -> Any:
    """One batch's model inputs (``_device_inputs``) with Qwen's rope positions worked out on
    the host. ``texts``: the templated prompts, when the caller made them (a Thinking
    model's, its reasoning closed)."""
    from chord_core.model.positions import add_host_positions

    return add_host_positions(lm, _device_inputs(
        lm, images, list(texts) if texts is not None else _prompts(lm, statements)))


def _device_inputs(lm: LoadedModel, images: Sequence[np.ndarray], texts: Sequence[str]) -> Any:
    """Built on the device (``model/image_batch.py``) when the images have the model's size,
    else by the processor; no rope positions (a Thinking model's reasoning is prefilled by
    the decoder, which has the model work them out and keeps the offsets that sets)."""
    from chord_core.model.image_batch import image_batch_inputs
    from chord_core.model.inputs import check_frames

    for i, img in enumerate(images):
        check_frames(img, 3, f"image {i}")
    fast = image_batch_inputs(lm, images, texts, lambda im, tx: _processor_inputs(lm, im, tx))
    return fast if fast is not None else _processor_inputs(lm, images, texts)


def _processor_inputs(lm: LoadedModel, images: Sequence[np.ndarray], texts: Sequence[str]
                      ) -> Any:
    """The processor's own path (the reference, and what a script without Chord does)."""
    from chord_core.model.inputs import check_frames, no_resize_kwargs

    sizes = [check_frames(img, 3, f"image {i}") for i, img in enumerate(images)]
    processor = lm.processor
    return processor(text=list(texts), images=list(images), padding=True, return_tensors="pt",
                     **no_resize_kwargs(processor.image_processor, sizes))


def _prefill(lm: LoadedModel, inputs: Any) -> list[EntailScore]:
    """One forward pass; the last position's next-token distribution per row (left-padded,
    so the last position is every row's own)."""
    import torch

    inputs = inputs.to(lm.input_device)
    with lm.lock, torch.inference_mode():
        try:
            logits = lm.model(**inputs, use_cache=False, logits_to_keep=1).logits[:, -1]
        except TypeError:  # a transformers without logits_to_keep
            logits = lm.model(**inputs, use_cache=False).logits[:, -1]
        return _scores(lm, logits, inputs["attention_mask"].sum(-1).tolist())


def _scores(lm: LoadedModel, logits: Any, lengths: Sequence[int]) -> list[EntailScore]:
    """Next-token logits [b, V] → each row's label probabilities (the answer words' shares of
    the model's probability) and how much probability the answer words got at all."""
    import torch

    ids = getattr(lm, "_answer_ids", None)
    if ids is None:
        ids = answer_token_ids(lm.processor.tokenizer)
        object.__setattr__(lm, "_answer_ids", ids)
    with torch.inference_mode():
        probs = torch.softmax(logits.float(), dim=-1)
        mass = torch.stack([probs[:, ids[k]].sum(-1) for k in LABELS], dim=-1).cpu()
    total = mass.sum(-1).clamp_min(1e-30)
    return [EntailScore({k: float(row[i] / t) for i, k in enumerate(LABELS)}, float(t),
                        int(n))
            for row, t, n in zip(mass, total, lengths)]


def summarise(statement: str, frames: Sequence[EntailFrame]) -> Entailment:
    """The verdict over a clip's frames.

    The statement holds if it holds at some moment: when any frame's most likely label is
    entailment, the verdict is entailment and its probabilities are those of the frame where
    entailment is most likely. Otherwise contradiction when most frames contradict it, else
    neutral, with the probabilities averaged over the frames. ``supporting_s`` /
    ``contradicting_s`` are the times of the frames whose most likely label is that one."""
    if not frames:
        raise ConfigError("no frames to check the statement on",
                          hint="check that the clip decodes")
    support = [f for f in frames if f.label == "entailment"]
    contra = [f for f in frames if f.label == "contradiction"]
    if support:
        best = max(support, key=lambda f: f.entailment)
        verdict, probs = "entailment", best.probabilities()
    else:
        verdict = "contradiction" if len(contra) * 2 > len(frames) else "neutral"
        probs = {k: sum(f.probabilities()[k] for f in frames) / len(frames) for k in LABELS}
    return Entailment(statement=statement, verdict=verdict,
                      probabilities={k: round(v, 6) for k, v in probs.items()},
                      frames=tuple(frames), supporting_s=tuple(f.t_s for f in support),
                      contradicting_s=tuple(f.t_s for f in contra))


def entail_frames(lm: LoadedModel, plan: Any, frames: np.ndarray, statement: str, *,
                  batch_size: int = 16, cancel: threading.Event | None = None,
                  on_batch: Callable[[int, int], None] | None = None,
                  think_tokens: int | None = None) -> dict[str, Any]:
    """A clip's sampled frames (or one image) checked against ``statement``: the result
    body for the engine (``entailment``, ``raw_outputs``, timings, warnings).
    ``think_tokens``: a Thinking model's reasoning budget per frame."""
    statement = clean_statement(statement)
    scores, pre_s, run_s = score_images(lm, list(frames), [statement] * len(frames),
                                        batch_size=batch_size, cancel=cancel,
                                        on_batch=on_batch, think_tokens=think_tokens)
    return body_from_scores(plan, statement, scores, pre_s, run_s,
                            think_tokens=think_tokens)


def body_from_scores(plan: Any, statement: str, scores: Sequence[EntailScore], pre_s: float,
                     run_s: float, think_tokens: int | None = None) -> dict[str, Any]:
    """Per-frame scores → the curve, the verdict, and a warning when the answer words got
    little of the model's probability (the numbers then mean little)."""
    curve = [EntailFrame(t_s=float(t), frame_index=int(i),
                         **{k: round(sc.probabilities[k], 6) for k in LABELS})
             for t, i, sc in zip(plan.timestamps_s, plan.frame_indices, scores)]
    warnings = []
    mass = sum(sc.answer_mass for sc in scores) / max(1, len(scores))
    if mass < 0.5:
        warnings.append(f"the answer words got only {mass:.1%} of the model's next-token "
                        "probability on average: the probabilities are unreliable (an "
                        "untrained or unsuited model?)")
    raw = tuple(f"{sc.label} (answer mass {sc.answer_mass:.3f})" for sc in scores)
    body = {"entailment": summarise(statement, curve), "raw_outputs": raw,
            "preprocess_s": pre_s, "generate_s": run_s, "warnings": tuple(warnings)}
    if any(sc.reasoning or sc.reasoning_cut for sc in scores):  # a Thinking model
        from chord_core.analysis.entail_think import THINK_TOKENS_DEFAULT, think_warnings

        body["reasoning"] = tuple(sc.reasoning for sc in scores)
        body["warnings"] += tuple(think_warnings(scores, think_tokens or THINK_TOKENS_DEFAULT))
    return body
