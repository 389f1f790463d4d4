"""The vision tower's varlen attention (``fastvision.attend``): on a GPU with torch's varlen
flash kernel, one call a layer on the packed spans. The kernel is faked here at its boundary
(``_varlen_for``: this machine has no GPU) by one that attends each span on the CPU, so what
is checked is what Chord hands it and does with it: the spans' own bounds as int32, the
longest span, the scale, the result used as it comes, and the grouped SDPA after a failure.
``tests/gpu/test_vision_varlen_gpu.py`` runs the real kernel against the grouped SDPA."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from chord_core.config import ModelConfig
from chord_core.model import fastvision
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m
from tower import video_features


class FakeVarlen:
    """``varlen_attn``'s signature and result, each span attended alone on the CPU."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[dict] = []
        self.fail = fail

    def __call__(self, q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None):
        self.calls.append({"cu_q": cu_q, "cu_k": cu_k, "max_q": max_q, "max_k": max_k,
                           "scale": scale, "shape": tuple(q.shape)})
        if self.fail:
            raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")
        out = torch.empty_like(q)
        bounds = cu_q.tolist()
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                out[a:b] = torch.nn.functional.scaled_dot_product_attention(
                    q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1),
                    scale=scale).transpose(0, 1)
        return out


@pytest.fixture
def fake(monkeypatch):
    kernel = FakeVarlen()
    monkeypatch.setattr(fastvision, "_varlen_for", lambda t: kernel)
    monkeypatch.setattr(fastvision, "_varlen_broken", [])
    return kernel


def test_attend_gives_the_kernel_the_spans_as_they_are(fake):
    torch.manual_seed(0)
    q, k, v = (torch.randn(40, 2, 8) for _ in range(3))
    cu = torch.tensor([0, 16, 32, 36, 40], dtype=torch.int64)  # lengths 16, 16, 4, 4
    out = fastvision.attend(q, k, v, cu, 0.35)
    (call,) = fake.calls
    assert call["cu_q"].dtype == torch.int32 and call["cu_q"].tolist() == cu.tolist()
    assert call["cu_k"] is call["cu_q"]
    assert (call["max_q"], call["max_k"], call["scale"], call["shape"]) == (16, 16, 0.35,
                                                                             (40, 2, 8))
    torch.testing.assert_close(out, fastvision.grouped_attention(q, k, v, cu, 0.35))
    empty = torch.zeros(0, 2, 8)  # no patches: nothing for the kernel
    assert fastvision.attend(empty, empty, empty, torch.tensor([0]), 0.35).shape == (0, 2, 8)
    assert len(fake.calls) == 1


@pytest.mark.parametrize("model,spans", [("test", {64, 576}), ("test-qwen3", {448})],
                         ids=["qwen2.5-vl", "qwen3-vl"])
def test_the_tower_calls_the_kernel_once_a_layer_and_agrees_with_the_loop(
        fake, tiny_model_dir, model, spans):
    lm = m.load_model(ModelConfig(model=model, device="cpu"))
    rng = np.random.default_rng(3)
    clips = [(rng.integers(0, 255, (4, 252, 448, 3), dtype=np.uint8),
              {"total_num_frames": 4, "fps": 2.0, "frames_indices": list(range(4))}, "a")]
    inputs = model_inputs.build_video_batch(lm, clips)

    ours = video_features(lm, inputs)
    layers = len(fastvision.vision_tower(lm.model).blocks)
    assert len(fake.calls) == layers
    # Qwen2.5-VL, 448×252 frames: whole windows of 64 patches and the bottom row's of 16,
    # and in the full-attention layers one span a frame pair (32 × 18 patches); Qwen3-VL
    # attends over each frame pair in every layer (16-px patches, 252 resized to 256: 28 × 16)
    assert {c["max_q"] for c in fake.calls} == spans
    with fastvision.disabled(lm.model):
        loop = video_features(lm, inputs)
    torch.testing.assert_close(ours, loop, rtol=1e-5, atol=1e-5)


def test_a_kernel_that_fails_sends_this_and_every_later_call_to_the_grouped_sdpa(
        monkeypatch, caplog):
    kernel = FakeVarlen(fail=True)
    monkeypatch.setattr(fastvision, "_varlen_broken", [])
    monkeypatch.setattr(fastvision, "_varlen_kernel", lambda: kernel)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    q, k, v = (torch.randn(24, 2, 8, dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, 8, 24], dtype=torch.int32)
    with caplog.at_level(logging.WARNING, logger="chord_core.model.fastvision"):
        first = fastvision.attend(q, k, v, cu, 0.5)
        second = fastvision.attend(q, k, v, cu, 0.5)
    assert len(kernel.calls) == 1  # tried once, then never again
    want = fastvision.grouped_attention(q, k, v, cu, 0.5)
    assert torch.equal(first, want) and torch.equal(second, want)
    assert caplog.text.count("varlen vision attention failed") == 1
    assert "Ampere" in caplog.text


def test_the_kernel_is_only_for_half_precision_on_a_gpu_and_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(fastvision, "_varlen_broken", [])
    monkeypatch.setattr(fastvision, "_varlen_kernel", lambda: "kernel")
    cpu = torch.zeros(2, dtype=torch.bfloat16)
    assert fastvision._varlen_for(cpu) is None  # a CPU tensor
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert fastvision._varlen_for(cpu) == "kernel"
    assert fastvision._varlen_for(cpu.float()) is None  # float32: the grouped SDPA
    monkeypatch.setattr(fastvision, "VARLEN", False)
    assert fastvision._varlen_for(cpu) is None
