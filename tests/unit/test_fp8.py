"""FP8 prefill products (``CHORD_FP8=1``, ``model/fp8.py``), on the CPU's ``_scaled_mm``: the
quantised product stays close to the exact one, a long prefill takes it in every projection,
a short input and every decode step keep the bf16 weight (tokens unchanged), and a result
says which products made it."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from chord_core.config import ModelConfig, model_config_from_env
from chord_core.model import fp8
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.fixture(scope="module", params=["test", "test-qwen3"], ids=["qwen2.5-vl", "qwen3-vl"])
def pair(request, tiny_model_dir):
    """(plain, fp8) loads of one tiny checkpoint: the same weights, two sets of products."""
    plain = m.load_model(ModelConfig(model=request.param, device="cpu"))
    quant = m.load_model(ModelConfig(model=request.param, device="cpu", fp8=True))
    return plain, quant


def test_a_product_in_fp8_is_close_to_the_exact_one() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 128, generator=g)
    w = torch.randn(64, 128, generator=g) * torch.rand(64, 1, generator=g)  # channel scales
    bias = torch.randn(64, generator=g)
    q, scale = fp8.quantize_weight(w)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (1, 64)
    assert _rel(q.float() * scale.t(), w) < 0.05  # per channel: each row keeps its range
    exact = torch.nn.functional.linear(x, w, bias)
    ours = fp8.fp8_linear(x.reshape(3, 100, 128), q, scale, bias)
    assert ours.shape == (3, 100, 64) and ours.dtype == x.dtype
    assert 0 < _rel(ours.reshape(300, 64), exact) < 0.06
    # a row of zeros (padding) stays zeros, not NaN
    assert fp8.fp8_linear(torch.zeros(2, 128), q, scale, None).abs().max() == 0


def test_every_projection_of_the_language_model_takes_fp8(pair) -> None:
    plain, quant = pair
    layers = len(quant.model.model.language_model.layers)
    assert len(fp8.projections(quant.model)) == 7 * layers
    assert fp8.installed(quant.model) and not fp8.installed(plain.model)
    assert quant.info.fp8 and not plain.info.fp8
    assert quant.info.to_dict()["fp8"] is True
    # the checkpoint's own weights are untouched (the fast decoder's fused views read them)
    for a, b in zip(fp8.projections(plain.model), fp8.projections(quant.model)):
        assert torch.equal(a.weight, b.weight)


def test_a_long_prefill_takes_fp8_products_and_a_short_one_bf16(pair) -> None:
    """Inside a real prefill, each projection's FP8 output is within a few percent of the
    exact product of the same input (e4m3 keeps 3 mantissa bits). The tiny model's logits
    are not compared for closeness: its random attention is peaky, so 3 % per product is a
    third of its logits after two layers; a 7B's agreement is measured on the GPU
    (``run_device.sh fp8``)."""
    plain, quant = pair
    errors: list[float] = []

    def check(mod, args, out):
        exact = torch.nn.functional.linear(args[0], mod.weight, mod.bias)
        errors.append(_rel(out, exact))

    hooks = [lin.register_forward_hook(check) for lin in fp8.projections(quant.model)]
    vocab = plain.model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (1, fp8.MIN_ROWS + 44),
                        generator=torch.Generator().manual_seed(1))
    try:
        with torch.inference_mode():
            ours = quant.model(input_ids=ids).logits
            assert len(errors) == len(hooks) and all(0 < e < 0.06 for e in errors), errors
            assert torch.isfinite(ours).all()
            assert not torch.equal(ours, plain.model(input_ids=ids).logits)
            errors.clear()
            short = ids[:, :40]
            assert torch.equal(quant.model(input_ids=short).logits,
                               plain.model(input_ids=short).logits)
            assert errors == [0.0] * len(hooks)  # the bf16 product itself
            errors.clear()
            with fp8.disabled(quant.model):  # what the benchmark's bf16 side runs
                assert torch.equal(quant.model(input_ids=ids).logits,
                                   plain.model(input_ids=ids).logits)
            assert errors == [0.0] * len(hooks)
            assert torch.equal(quant.model(input_ids=ids).logits, ours)  # and back
    finally:
        for h in hooks:
            h.remove()


def test_decoding_keeps_bf16_products(pair) -> None:
    """A short clip's prefill (under MIN_ROWS tokens) and every decode step use the bf16
    weights: the fast decoder's tokens are the plain model's."""
    plain, quant = pair
    frames = np.random.default_rng(0).integers(0, 255, (4, 56, 84, 3), dtype=np.uint8)
    meta = {"total_num_frames": 4, "fps": 2.0, "frames_indices": list(range(4))}
    a = model_inputs.build_video_inputs(plain, frames, meta, "Describe this clip.")
    b = model_inputs.build_video_inputs(quant, frames, meta, "Describe this clip.")
    assert a["input_ids"].shape[1] < fp8.MIN_ROWS
    assert quant.decoder.generate(b, 24).tolist() == plain.decoder.generate(a, 24).tolist()


def test_the_setting_and_where_it_is_declined(monkeypatch, caplog, tiny_model_dir) -> None:
    assert not model_config_from_env({}).fp8
    assert model_config_from_env({"CHORD_FP8": "1"}).fp8
    lm = m.load_model(ModelConfig(model="test", device="cpu", decoder="generate"))
    lm.model.model.language_model.layers[0].mlp._hf_hook = object()  # dispatched by hooks
    with caplog.at_level(logging.WARNING, logger="chord_core.model.fp8"):
        assert fp8.install(lm.model) == 0
    assert "bf16 products kept" in caplog.text and "several devices" in caplog.text
    assert not fp8.installed(lm.model)
