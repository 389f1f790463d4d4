"""The vision tower's patch embedding as one matrix product instead of a 3-D convolution.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL embed each 2×14×14 patch with ``nn.Conv3d(kernel_size ==
stride)``: the windows never overlap, so it is a linear map of the flattened patch. As a
convolution it goes to cuDNN's 3-D kernels, which for this degenerate shape are slow on some
GPU / cuDNN / dtype combinations (transformers issue 45750, vLLM PR 27418: 10–60× a GEMM,
seconds a call in the worst cases), and on the CPU it pays im2col. The processor hands the
tower patches already flattened in the weight's (channel, time, row, column) order, so
``F.linear`` on the weight viewed as ``[embed, C·T·P·P]`` is the same arithmetic as one GEMM.

:func:`install` gives the patch-embedding modules of one loaded model that forward (nothing
global is patched; a model whose module is not the plain non-overlapping Conv3d keeps its own).
"""

from __future__ import annotations

import logging
import types
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger(__name__)


def install(model: Any) -> int:
    """Swap the forward of every eligible patch embedding in ``model``; returns how many."""
    changed = 0
    for module in model.modules():
        proj = getattr(module, "proj", None)
        if not type(module).__name__.endswith("PatchEmbed") or not _degenerate(proj):
            continue
        if getattr(module, "_chord_linear", False):
            continue
        module._chord_linear = True
        module.forward = types.MethodType(_linear_forward, module)
        changed += 1
    if changed:
        log.debug("patch embedding as a matrix product in %d module(s)", changed)
    return changed


@contextmanager
def disabled(model: Any) -> Iterator[None]:
    """transformers' own Conv3d forward meanwhile (benchmarks time the naive path on the
    same weights)."""
    changed = [m for m in model.modules() if getattr(m, "_chord_linear", False)]
    for m in changed:
        del m.forward  # the class's own again
    try:
        yield
    finally:
        for m in changed:
            m.forward = types.MethodType(_linear_forward, m)


def _degenerate(proj: Any) -> bool:
    """A Conv3d whose windows tile the input without overlap, gaps or groups."""
    import torch

    return isinstance(proj, torch.nn.Conv3d) and tuple(proj.kernel_size) == \
        tuple(proj.stride) and all(p == 0 for p in proj.padding) and \
        all(d == 1 for d in proj.dilation) and proj.groups == 1 and \
        proj.padding_mode == "zeros"


def _linear_forward(self: Any, hidden_states: Any) -> Any:
    import torch.nn.functional as F

    weight = self.proj.weight
    flat = hidden_states.reshape(-1, weight[0].numel()).to(dtype=weight.dtype)
    return F.linear(flat, weight.reshape(weight.shape[0], -1), self.proj.bias)
