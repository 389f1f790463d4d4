"""The vision MLP widened to an aligned width computes what the narrow one computes."""

from __future__ import annotations

import pytest
import torch

from chord_core.model import mlp_align


class _Holder(torch.nn.Module):
    def __init__(self, visual: torch.nn.Module) -> None:
        super().__init__()
        self.visual = visual


def _qwen25_tower(width: int) -> torch.nn.Module:
    from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
        Qwen2_5_VisionTransformerPretrainedModel,
    )

    cfg = Qwen2_5_VLVisionConfig(depth=2, hidden_size=32, intermediate_size=width, num_heads=2,
                                 out_hidden_size=48, fullatt_block_indexes=[1], window_size=112,
                                 patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                                 in_chans=3, hidden_act="silu")
    torch.manual_seed(0)
    tower = Qwen2_5_VisionTransformerPretrainedModel._from_config(cfg).eval()
    for p in tower.parameters():  # biases too: a zero bias would hide a padded unit's bias
        torch.nn.init.normal_(p, std=0.2)
    return tower


def _qwen3_tower(width: int) -> torch.nn.Module:
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLVisionConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel

    cfg = Qwen3VLVisionConfig(depth=2, hidden_size=32, intermediate_size=width, num_heads=2,
                              out_hidden_size=48, patch_size=16, spatial_merge_size=2,
                              temporal_patch_size=2, num_position_embeddings=64,
                              deepstack_visual_indexes=[0])
    torch.manual_seed(0)
    tower = Qwen3VLVisionModel._from_config(cfg).eval()
    for p in tower.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return tower


def _features(tower: torch.nn.Module, patch: int) -> torch.Tensor:
    grid = torch.tensor([[1, 8, 12], [1, 4, 4]])  # two images, windows of two sizes
    torch.manual_seed(1)
    pixels = torch.randn(int(grid.prod(-1).sum()), 3 * 2 * patch * patch)
    with torch.inference_mode():
        out = tower(pixels, grid_thw=grid)
    return out if isinstance(out, torch.Tensor) else out.pooler_output


@pytest.mark.parametrize("make,patch,width,wide", [(_qwen25_tower, 14, 60, 64),
                                                   (_qwen3_tower, 16, 70, 128)],
                         ids=["qwen2.5-vl", "qwen3-vl"])
def test_an_unaligned_vision_mlp_is_widened_with_the_same_output(make, patch, width, wide):
    holder = _Holder(make(width))
    before = _features(holder.visual, patch)
    assert mlp_align.install(holder) == 2  # both blocks (the merger's width, 128, is aligned)
    widths = {m.in_features for n, m in holder.visual.named_modules()
              if n.endswith(("mlp.down_proj", "mlp.linear_fc2"))}
    assert widths == {wide}
    after = _features(holder.visual, patch)
    assert after.shape == before.shape
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)
    assert mlp_align.install(holder) == 0  # never widened twice
    with mlp_align.disabled(holder):
        narrow = {m.in_features for n, m in holder.visual.named_modules()
                  if n.endswith(("mlp.down_proj", "mlp.linear_fc2"))}
        assert narrow == {width}
        torch.testing.assert_close(_features(holder.visual, patch), before)
    assert {m.out_features for n, m in holder.visual.named_modules()
            if n.endswith(("mlp.up_proj", "mlp.gate_proj", "mlp.linear_fc1"))} == {wide}


def test_an_aligned_width_and_a_model_without_a_tower_are_left_alone():
    holder = _Holder(_qwen25_tower(64))
    assert mlp_align.install(holder) == 0
    assert mlp_align.install(torch.nn.Linear(3, 3)) == 0


def test_the_default_load_widens_the_real_shapes_unaligned_mlp(tiny_model_dir):
    """The 7B's width, 3,420, becomes 3,456 through the fast path's install (the tiny test
    checkpoint's own width, 64, is aligned and stays)."""
    from chord_core.config import ModelConfig
    from chord_core.model import loading

    lm = loading.load_model(ModelConfig(model="test", device="cpu"))
    downs = [m for n, m in lm.model.named_modules() if n.endswith("mlp.down_proj")
             and ".visual." in f".{n}"]
    assert downs and all(d.in_features == 64 for d in downs)
    holder = _Holder(_qwen25_tower(3420))
    assert mlp_align.install(holder) == 2
    assert {m.in_features for n, m in holder.visual.named_modules()
            if n.endswith("down_proj")} == {3456}
