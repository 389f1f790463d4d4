"""Entailment inputs built without the processor's image path (``model/image_batch.py``):
equal to the processor's on both tiny families, checked once per model (a processor that
gives anything else keeps its own path), and the same scores; a truncated image that the
manager plans from its header fails alone, in the worker, with the probe's message."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from chord_core.analysis import entailment as ent
from chord_core.analysis.engine import Engine
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.errors import InputError
from chord_core.model.image_batch import image_batch_inputs
from chord_core.runtime.cluster import in_process_manager
from chord_core.runtime.jobs import JobSpec, JobState


@pytest.fixture(scope="module", params=["test", "test-qwen3"])
def lm(request, tiny_model_dir):
    return Engine(ModelConfig(model=request.param, device="cpu")).load()


def _texts(lm, statements):
    return [lm.processor.apply_chat_template(ent.entail_messages(s), tokenize=False,
                                             add_generation_prompt=True) for s in statements]


def _images(lm, sizes, seed=0):
    ip = lm.processor.image_processor
    side = int(ip.patch_size) * int(ip.merge_size)
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h * side, w * side, 3), dtype=np.uint8) for h, w in sizes]


def _reference(lm):
    return lambda images, texts: ent._processor_inputs(lm, images, texts)


def test_device_inputs_equal_the_processors(lm) -> None:
    object.__setattr__(lm, "_chord_image_batch", None)
    # two sizes in one batch, and statements of different lengths (left padding)
    images = _images(lm, [(4, 4), (3, 5), (4, 4), (3, 5)])
    texts = _texts(lm, ["a", "a much longer statement about the picture", "b c", "d"])
    mine = image_batch_inputs(lm, images, texts, _reference(lm))
    assert mine is not None and lm._chord_image_batch is True
    ref = ent._processor_inputs(lm, images, texts)
    assert set(mine.keys()) == set(ref.keys())
    for key in ref:
        if ref[key].is_floating_point():
            torch.testing.assert_close(mine[key].float(), ref[key].float(), atol=1e-5, rtol=0)
        else:
            assert torch.equal(mine[key], ref[key]), key


def test_scores_are_the_same_either_way(lm) -> None:
    images = _images(lm, [(4, 4)] * 5, seed=1)
    statements = [f"statement {i}" for i in range(5)]
    object.__setattr__(lm, "_chord_image_batch", None)
    fast, _, _ = ent.score_images(lm, images, statements, batch_size=2)
    assert lm._chord_image_batch is True
    object.__setattr__(lm, "_chord_image_batch", False)  # the processor from here on
    slow, _, _ = ent.score_images(lm, images, statements, batch_size=3)
    object.__setattr__(lm, "_chord_image_batch", None)
    assert [s.prompt_tokens for s in fast] == [s.prompt_tokens for s in slow]
    for a, b in zip(fast, slow):
        for k in ent.LABELS:
            assert a.probabilities[k] == pytest.approx(b.probabilities[k], abs=1e-5)


def test_a_processor_that_differs_keeps_its_own_path(lm) -> None:
    object.__setattr__(lm, "_chord_image_batch", None)
    images = _images(lm, [(2, 2), (2, 2)])
    texts = _texts(lm, ["x", "y"])

    def other_normalisation(imgs, txts):  # the real processor, other pixel statistics
        return lm.processor(text=list(txts), images=list(imgs), padding=True,
                            return_tensors="pt", image_mean=[0.0, 0.0, 0.0],
                            image_std=[1.0, 1.0, 1.0],
                            size={"shortest_edge": 1, "longest_edge": 10 ** 8})

    assert image_batch_inputs(lm, images, texts, other_normalisation) is None
    assert lm._chord_image_batch is False
    assert image_batch_inputs(lm, images, texts, _reference(lm)) is None  # stays off
    object.__setattr__(lm, "_chord_image_batch", None)


def test_sizes_off_the_token_grid_go_to_the_processor(lm) -> None:
    object.__setattr__(lm, "_chord_image_batch", None)
    odd = [np.zeros((100, 130, 3), dtype=np.uint8)]
    assert image_batch_inputs(lm, odd, _texts(lm, ["x"]), _reference(lm)) is None
    assert lm._chord_image_batch is None  # not decided by a batch it cannot build
    scores, _, _ = ent.score_images(lm, odd, ["x"])
    assert len(scores) == 1


def test_a_truncated_image_fails_alone_in_the_worker(tmp_path, tiny_model_dir) -> None:
    rng = np.random.default_rng(3)
    good = tmp_path / "good.png"
    Image.fromarray(rng.integers(0, 256, (200, 300, 3), dtype=np.uint8)).save(good)
    cut = tmp_path / "cut.png"
    cut.write_bytes(good.read_bytes()[:5000])  # a header that reads, pixels that do not
    manager = in_process_manager(ModelConfig(model="test", device="cpu", batch_size=4))
    try:
        manager.wait_ready(300)
        ids = [manager.submit(JobSpec(AnalysisRequest(str(p), "entail", "a thing")))
               for p in (good, cut, good)]
        finals = [manager.wait(j, 300) for j in ids]
    finally:
        manager.shutdown()
    assert [f.state for f in finals] == [JobState.DONE, JobState.FAILED, JobState.DONE]
    assert finals[1].error["type"] == "InputError"
    assert "cut.png is not a readable image" in finals[1].error["message"]
    assert finals[0].result.entailment.probabilities == finals[2].result.entailment.probabilities
    with pytest.raises(InputError):
        Engine(ModelConfig(model="test", device="cpu")).analyze(
            AnalysisRequest(str(cut), "entail", "a thing"))


def test_rope_positions_from_the_host_give_the_same_scores(lm) -> None:
    """``model/positions.py``: the positions worked out on the host are the model's own, and
    a pass given them scores exactly as one left to work them out (both tiny families)."""
    from chord_core.model.positions import add_host_positions

    object.__setattr__(lm, "_chord_host_positions", None)
    images = _images(lm, [(4, 4), (3, 5), (4, 4)], seed=3)
    texts = _texts(lm, ["a", "a much longer statement about the picture", "b c"])
    plain = ent._processor_inputs(lm, images, texts)
    given = add_host_positions(lm, ent._processor_inputs(lm, images, texts))
    assert lm._chord_host_positions is True and "position_ids" in given
    assert "position_ids" not in plain
    ids, mask = plain["input_ids"], plain["attention_mask"]
    assert given["position_ids"].shape[-2:] == ids.shape  # (3 or 4, rows, length)
    time_axis = given["position_ids"][-3]  # (t, h, w): rows are left-padded, time starts at
    for row, m in zip(time_axis, mask):    # each row's first real token and never goes back
        real = row[m.bool()]
        assert int(real[0]) == 0 and bool((real[1:] >= real[:-1]).all())
    a, b = ent._prefill(lm, plain), ent._prefill(lm, given)
    assert a == b  # probabilities, answer mass and prompt tokens, exactly


def test_a_model_without_a_rope_index_keeps_its_inputs() -> None:
    from chord_core.model.positions import add_host_positions

    class Bare:
        model = object()
        input_device = "cpu"

    bare = Bare()
    inputs = {"input_ids": torch.ones(1, 3, dtype=torch.long)}
    assert add_host_positions(bare, inputs) is inputs and "position_ids" not in inputs
    assert bare._chord_host_positions is False  # not tried again
