"""The patch embedding as one matrix product computes what the Conv3d computes, on both
families' towers, and only non-overlapping convolutions are swapped."""

from __future__ import annotations

import pytest
import torch

from chord_core.config import ModelConfig
from chord_core.model import loading as m
from chord_core.model import patch_embed


@pytest.fixture(scope="module", params=["test", "test-qwen3"], ids=["qwen2.5-vl", "qwen3-vl"])
def lm(request, tiny_model_dir):
    return m.load_model(ModelConfig(model=request.param, device="cpu"))


def _embeds(model):
    return [mod for mod in model.modules() if type(mod).__name__.endswith("PatchEmbed")]


def test_the_loaded_towers_embed_with_a_matrix_product_and_agree_with_the_conv(lm) -> None:
    (embed,) = _embeds(lm.model)
    assert getattr(embed, "_chord_linear", False)  # installed by the fast path at load
    proj = embed.proj
    n, width = 37, proj.weight[0].numel()
    x = torch.randn(n, width, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ours = embed(x)
        conv = type(embed).forward(embed, x)  # the class's own Conv3d forward
    assert ours.shape == conv.shape == (n, proj.out_channels)
    assert torch.allclose(ours, conv, atol=1e-5, rtol=1e-4)
    assert patch_embed.install(lm.model) == 0  # never installed twice


def test_a_prefill_scores_the_same_with_either_embedding(lm) -> None:
    import numpy as np

    from chord_core.analysis import entailment as ent

    img = np.random.default_rng(1).integers(0, 255, (56, 84, 3), dtype=np.uint8)
    text = lm.processor.apply_chat_template(ent.entail_messages("a red square"),
                                            tokenize=False, add_generation_prompt=True)
    inputs = ent._processor_inputs(lm, [img], [text])
    (embed,) = _embeds(lm.model)
    with torch.inference_mode():
        ours = lm.model(**inputs).logits[0, -1]
        with patch_embed.disabled(lm.model):
            assert "forward" not in vars(embed)  # the class's Conv3d forward meanwhile
            conv = lm.model(**inputs).logits[0, -1]
    assert "forward" in vars(embed)  # and ours again
    assert torch.allclose(ours, conv, atol=1e-4, rtol=1e-4)


def test_only_non_overlapping_convolutions_are_swapped() -> None:
    class PatchEmbed(torch.nn.Module):
        def __init__(self, stride: int) -> None:
            super().__init__()
            self.proj = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(2, stride, stride))

    tiling, overlapping = PatchEmbed(4), PatchEmbed(2)
    model = torch.nn.Sequential(tiling, overlapping)
    assert patch_embed.install(model) == 1
    assert getattr(tiling, "_chord_linear", False)
    assert not getattr(overlapping, "_chord_linear", False)
