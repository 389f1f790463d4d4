"""Scoring a Thinking model's answer from the cache its reasoning left (``FastDecoder.
continue_logits``): the logits equal one full forward over prompt + kept tokens + closing,
row by row, whatever each row keeps and however long its closing is."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chord_core.analysis import entail_think as et
from chord_core.analysis import entailment as ent
from chord_core.config import ModelConfig
from chord_core.model import loading as m


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return m.load_model(ModelConfig(model="test-qwen3-thinking", device="cpu", decoder="fast"))


def _images(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 255, (56, 56, 3), dtype=np.uint8) for _ in range(n)]


def _texts(lm, n: int) -> list[str]:
    return [lm.processor.apply_chat_template(ent.entail_messages(f"statement {i}"),
                                             tokenize=False, add_generation_prompt=True)
            for i in range(n)]


def _full_forward(lm, image, text, extra: list[int]) -> torch.Tensor:
    """The reference: one row alone, its prompt and image, then ``extra`` tokens."""
    one = ent._processor_inputs(lm, [image], [text])
    ids = torch.cat([one["input_ids"], torch.tensor([extra], dtype=torch.long)], dim=1)
    rest = {k: v for k, v in one.items() if k not in ("input_ids", "attention_mask")}
    if "mm_token_type_ids" in rest:  # the extra tokens are text (type 0)
        kinds = rest["mm_token_type_ids"]
        rest["mm_token_type_ids"] = torch.cat([kinds, kinds.new_zeros(1, len(extra))], dim=1)
    with torch.inference_mode():
        out = lm.model(input_ids=ids, attention_mask=torch.ones_like(ids), **rest)
    return out.logits[0, -1].float()


@pytest.mark.parametrize("keep", [(2, 6, 0), (6, 6, 6), (1, 3, 5)])
def test_the_continuation_scores_as_one_full_forward_would(lm, keep) -> None:
    images, texts = _images(3), _texts(lm, 3)
    opening = lm.processor.tokenizer.encode(et.ANSWER_OPENING, add_special_tokens=False)
    tails = [opening, opening[-1:], opening[:2]]  # three lengths: rows fed right-aligned
    seen = {}

    def plan(new):
        seen["new"] = new
        return list(keep), tails

    new, logits, _ = et.generate_then_continue(
        lm, ent._processor_inputs(lm, images, texts), 6, None, None, plan, reserve=8)
    assert logits is not None and logits.shape[0] == 3 and new.shape == (3, 6)
    for r in range(3):
        ref = _full_forward(lm, images[r], texts[r], new[r, :keep[r]].tolist() + tails[r])
        assert torch.allclose(logits[r], ref, atol=1e-4, rtol=1e-4), \
            (r, (logits[r] - ref).abs().max())


def test_no_room_left_means_no_continuation_and_the_next_generate_is_unchanged(lm) -> None:
    images, texts = _images(2), _texts(lm, 2)
    inputs = ent._processor_inputs(lm, images, texts)
    before, _ = m._generate(lm, inputs, 5, None, None)
    # a closing longer than the slots left past the answer: the decoder says so (None)
    _, logits, _ = et.generate_then_continue(lm, inputs, 5, None, None,
                                            lambda new: ([5, 5], [[1] * 400, [1]]), reserve=0)
    assert logits is None
    # nothing to continue from: a second call without a generate between
    assert lm.decoder.continue_logits([1, 1], [[1], [1]]) is None
    after, _ = m._generate(lm, inputs, 5, None, None)
    assert torch.equal(before, after)


def test_each_row_keeps_through_its_close_else_to_its_end_or_budget(lm) -> None:
    plan = et._Continuation(lm, [4, 4, 4, 2])
    close, end = plan.close, min(plan.ends)
    assert close is not None
    new = torch.tensor([[7, close, 9, 9],     # closed itself: keeps it, then "\n\n"
                        [7, 8, end, 9],       # an end token: dropped, the whole closing
                        [7, 8, 9, 10],        # the budget: all four, the whole closing
                        [7, 8, close, 9]])    # its own budget (2) ends it before the close
    keep, tails = plan(new)
    assert keep == [2, 2, 4, 2]
    assert tails == [plan.after_close, plan.closing, plan.closing, plan.closing]
    assert lm.processor.tokenizer.decode(plan.after_close) == "\n\n"
    assert lm.processor.tokenizer.decode(plan.closing) == et.ANSWER_OPENING


def test_a_thinking_batch_scores_without_a_second_pass(lm, monkeypatch) -> None:
    """score_images on the fast decoder: no second prefill of prompt and image (the plain
    pass is never called), and the probabilities are those of the full forward."""
    passes = []
    monkeypatch.setattr(ent, "_prefill", lambda *a, **k: passes.append(1) or [])
    images = _images(2)
    scores, _, _ = ent.score_images(lm, images, ["a cat", "a dog"], batch_size=2,
                                    think_tokens=3)
    assert passes == [] and len(scores) == 2
    for img, statement, sc in zip(images, ["a cat", "a dog"], scores):
        assert sc.reasoning_cut  # random weights never close: the budget ends them
        text = lm.processor.apply_chat_template(ent.entail_messages(statement),
                                                tokenize=False, add_generation_prompt=True)
        new, _ = m._generate(lm, ent._processor_inputs(lm, [img], [text]), 3, None, None,
                             stop_token=et.close_token(lm))
        closing = lm.processor.tokenizer.encode(et.ANSWER_OPENING, add_special_tokens=False)
        ref = ent._scores(lm, _full_forward(lm, img, text, new[0].tolist() + closing)[None],
                          [0])[0]
        for k in ent.LABELS:
            assert sc.probabilities[k] == pytest.approx(ref.probabilities[k], abs=1e-4)
