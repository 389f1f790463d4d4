"""The last MLP at the kept position only (``model/last_mlp.py``): the same logits and the
same tokens as every position through it, for both families; untouched where a call keeps
more than one position."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chord_core.analysis import entailment as ent
from chord_core.config import ModelConfig
from chord_core.model import last_mlp
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m


@pytest.fixture(scope="module", params=["test", "test-qwen3"], ids=["qwen2.5-vl", "qwen3-vl"])
def lm(request, tiny_model_dir):
    return m.load_model(ModelConfig(model=request.param, device="cpu"))


def _pair_inputs(lm):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (84, 112, 3), dtype=np.uint8) for _ in range(3)]
    return ent._inputs(lm, images, ["a dog", "two people near a red car", "x"])


class _Seen:
    """The shapes the last MLP was called with."""

    def __init__(self, lm):
        self.shapes: list[tuple] = []
        self.mlp = last_mlp.last_layer_mlp(lm.model)

    def __enter__(self):
        def hook(module, args, out):
            self.shapes.append(tuple(args[0].shape))
        self.handle = self.mlp.register_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def _forward(lm, inputs, **kw):
    with torch.inference_mode():
        return lm.model(**inputs, use_cache=False, **kw)


def test_the_fast_path_installs_it_and_a_kept_position_gets_the_same_logits(lm):
    assert last_mlp.installed(lm.model)
    inputs = _pair_inputs(lm)
    rows, length = inputs["input_ids"].shape
    with _Seen(lm) as seen:
        ours = _forward(lm, inputs, logits_to_keep=1).logits[:, -1]
    assert seen.shapes == [(rows, 1, lm.model.config.get_text_config().hidden_size)]
    with last_mlp.disabled(lm.model), _Seen(lm) as seen:
        full = _forward(lm, inputs, logits_to_keep=1).logits[:, -1]
    assert seen.shapes[0][:2] == (rows, length)
    torch.testing.assert_close(ours, full, rtol=1e-5, atol=1e-5)
    # and the entailment scores built on them
    a = ent._prefill(lm, inputs)
    with last_mlp.disabled(lm.model):
        b = ent._prefill(lm, inputs)
    for x, y in zip(a, b):
        assert x.probabilities == pytest.approx(y.probabilities, abs=1e-5)


def test_calls_that_keep_more_than_one_position_are_untouched(lm):
    inputs = _pair_inputs(lm)
    rows, length = inputs["input_ids"].shape
    with _Seen(lm) as seen:
        every = _forward(lm, inputs).logits  # every position's logits
        _forward(lm, inputs, logits_to_keep=1, output_hidden_states=True)
        _forward(lm, inputs, logits_to_keep=2)
    assert [s[:2] for s in seen.shapes] == [(rows, length)] * 3
    with _Seen(lm) as seen:
        kept = _forward(lm, inputs, logits_to_keep=1).logits[:, -1]
    assert seen.shapes[0][1] == 1
    torch.testing.assert_close(kept, every[:, -1], rtol=1e-5, atol=1e-5)


def test_a_call_that_fails_leaves_no_trim_behind(lm):
    inputs = _pair_inputs(lm)
    with pytest.raises(Exception):
        _forward(lm, {**inputs, "pixel_values": inputs["pixel_values"][:3]}, logits_to_keep=1)
    mlp = last_mlp.last_layer_mlp(lm.model)
    x = torch.randn(2, 5, lm.model.config.get_text_config().hidden_size)
    assert last_mlp._CALL.get() is None
    with torch.inference_mode():  # a direct call: every position, as the module computes it
        own = mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        torch.testing.assert_close(mlp(x), own)


def test_generation_is_token_for_token_the_same(lm):
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (4, 56, 84, 3), dtype=np.uint8)
    meta = {"total_num_frames": 4, "fps": 2.0, "frames_indices": list(range(4))}
    inputs = model_inputs.build_video_inputs(lm, frames, meta, "Describe this clip.")
    with _Seen(lm) as seen:
        ours = lm.decoder.generate(inputs, 24)
    assert seen.shapes and seen.shapes[0][1] == 1  # the prefill went through it, trimmed
    with last_mlp.disabled(lm.model):
        full = lm.decoder.generate(inputs, 24)
    assert ours.tolist() == full.tolist()
