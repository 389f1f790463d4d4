"""The real varlen flash kernel (``torch.nn.attention.varlen``) in the vision tower's
attention, against the grouped SDPA on the same tensors. Skipped, with the reason, where
there is no CUDA GPU or this torch has no varlen kernel with a ``scale``."""

from __future__ import annotations

import pytest


def _why_skip() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    from chord_core.model import fastvision

    if fastvision._varlen_kernel() is None:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn(scale=)"
    return None


pytestmark = pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")


def test_varlen_matches_the_grouped_sdpa_on_mixed_windows():
    import torch

    from chord_core.model import fastvision

    torch.manual_seed(0)
    # 448×252 frames' layout: windows of 64 patches, then the bottom row's of 16; 16 heads
    # of 80 as Qwen2.5-VL's tower has
    lengths = [64] * 8 + [16] * 4 + [64] * 8 + [16] * 4
    cu = torch.tensor([0] + lengths, device="cuda").cumsum(0).to(torch.int32)
    q, k, v = (torch.randn(int(cu[-1]), 16, 80, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    assert fastvision._varlen_for(q) is not None
    ours = fastvision.attend(q, k, v, cu, 80 ** -0.5)
    assert not fastvision._varlen_broken
    want = fastvision.grouped_attention(q, k, v, cu, 80 ** -0.5)
    torch.testing.assert_close(ours, want, rtol=2e-2, atol=2e-2)


def test_varlen_matches_the_grouped_sdpa_on_qwen3_frame_pairs():
    import torch

    from chord_core.model import fastvision

    torch.manual_seed(1)
    # Qwen3-VL-8B's tower: 16 heads of 72, one span a frame pair (448×256 frames: 448
    # patches), in every layer
    cu = torch.arange(0, 9 * 448, 448, device="cuda").to(torch.int32)
    q, k, v = (torch.randn(int(cu[-1]), 16, 72, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    ours = fastvision.attend(q, k, v, cu, 72 ** -0.5)
    assert not fastvision._varlen_broken
    want = fastvision.grouped_attention(q, k, v, cu, 72 ** -0.5)
    torch.testing.assert_close(ours, want, rtol=2e-2, atol=2e-2)
