"""Batched reasoning on the tiny Thinking checkpoint: a row ends at its own stop token (the
batch once every row has), and each row keeps its own reasoning budget — what it reasons
alone under greedy decoding — on both decoders and through the service's batch path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chord_core.analysis import entailment as ent
from chord_core.config import ModelConfig
from chord_core.model import loading as m


@pytest.fixture(scope="module",  # transformers' generate: the same checks, slow tier
                params=["fast", pytest.param("generate", marks=pytest.mark.slow)])
def lm(request, tiny_model_dir):
    return m.load_model(ModelConfig(model="test-qwen3-thinking", device="cpu",
                                    decoder=request.param))


def _images(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, 255, (56, 56, 3), dtype=np.uint8) for _ in range(n)]


def _inputs(lm, n: int):
    texts = [lm.processor.apply_chat_template(ent.entail_messages(f"statement {i}"),
                                              tokenize=False, add_generation_prompt=True)
             for i in range(n)]
    return ent._processor_inputs(lm, _images(n), texts)


def test_a_stop_token_ends_each_row_where_it_first_appears(lm) -> None:
    pad = lm.processor.tokenizer.pad_token_id
    free, _ = m._generate(lm, _inputs(lm, 3), 10, None, None)
    stop = int(free[0, 3])  # a token row 0 writes at its fourth step
    stopped, _ = m._generate(lm, _inputs(lm, 3), 10, None, None, stop_token=stop)
    ends = set(m._stop_ids(lm))
    for row, got in zip(free.tolist(), stopped.tolist()):
        cut = next((i + 1 for i, t in enumerate(row) if t == stop or t in ends), len(row))
        assert got[:cut] == row[:cut]  # the same tokens up to and including the stop
        assert all(t == pad for t in got[cut:])  # padding after it
    assert stopped[0, 4:].eq(pad).all() and stopped.shape[1] <= free.shape[1]
    # the next call without it is unchanged: the slot is given back
    again, _ = m._generate(lm, _inputs(lm, 3), 10, None, None)
    assert torch.equal(again, free)


def test_each_row_keeps_its_own_reasoning_budget(lm) -> None:
    images, statements = _images(3), ["a cat", "two dogs", "a red car"]
    mixed, _, _ = ent.score_batches(lm, [(images, statements, [2, 7, 4])])
    for i, budget in enumerate([2, 7, 4]):
        alone, _, _ = ent.score_images(lm, images[i:i + 1], statements[i:i + 1],
                                       batch_size=1, think_tokens=budget)
        assert mixed[i].reasoning == alone[0].reasoning
        assert mixed[i].reasoning_cut == alone[0].reasoning_cut
        for k in ent.LABELS:
            assert mixed[i].probabilities[k] == pytest.approx(alone[0].probabilities[k],
                                                              abs=1e-4)


@pytest.mark.slow  # about 6 s on 2 cores: the batch path's readers and three calls
def test_the_batch_path_reasons_to_each_requests_max_new_tokens(lm, tmp_path) -> None:
    from PIL import Image

    from chord_core.analysis.engine import Engine
    from chord_core.analysis.entail_batch import entail_many
    from chord_core.analysis.request import AnalysisRequest

    paths = []
    for i, img in enumerate(_images(2)):
        paths.append(str(tmp_path / f"i{i}.png"))
        Image.fromarray(img).save(paths[-1])
    engine = Engine(ModelConfig(model="test-qwen3-thinking", device="cpu"), loaded=lm)
    reqs = [AnalysisRequest(p, "entail", "a cat", max_new_tokens=b)
            for p, b in zip(paths, (2, 6))]
    out = entail_many(engine, reqs)
    for i, res in enumerate(out):  # in one batch, each as it reasons alone
        (alone,) = entail_many(engine, reqs[i:i + 1])
        assert res.reasoning == alone.reasoning and res.reasoning[0]
        assert res.entailment.probabilities == pytest.approx(alone.entailment.probabilities,
                                                             abs=1e-4)
    cut = [w for w in out[0].warnings if "budget" in w]
    assert not cut or "2-token budget" in cut[0]  # the warning names the row's own budget
