"""The vision tower's MLP widened to an aligned width with zero rows and columns.

Qwen2.5-VL's vision MLP is 1280 → 3420 → 1280 in all 32 blocks: about 60 % of the tower's
weights and arithmetic. 3420 is not a multiple of 8, so a bf16 row of its activations or of
the down projection's weight is 6,840 bytes, not a multiple of 16: Hopper's TMA-based cuBLAS
kernels need 16-byte aligned rows and the GEMMs fall back to older, slower ones. Widening the
intermediate to 3,456 (the next multiple of 64) with zero rows in the gate and up projections
(zero weights and zero bias) and zero columns in the down projection computes the same
function: each added unit is ``act(0) · 0`` (gated) or ``act(0)`` times a zero column, so it
adds exact zeros to each output. 1 % more arithmetic and weights in the tower.

:func:`install` widens the vision MLPs of one loaded model in place (a width already a
multiple of 8, as Qwen3-VL's 4,304, is left alone); :func:`disabled` narrows them back
meanwhile (benchmarks time both on the same weights).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger(__name__)

ALIGN = 8      # a width that is a multiple of this is left alone (16-byte bf16 rows)
MULTIPLE = 64  # an unaligned width is widened to the next multiple of this

# (projections whose output rows are the intermediate units, projection whose input columns
# are): Qwen2.5-VL's gated MLP, Qwen3-VL's plain one
_LAYOUTS = ((("gate_proj", "up_proj"), "down_proj"), (("linear_fc1",), "linear_fc2"))


def _mlps(model: Any) -> Iterator[tuple[Any, tuple[str, ...], str]]:
    from chord_core.model.fastvision import vision_tower

    tower = vision_tower(model)
    if tower is None:
        return
    for module in tower.modules():
        for ins, out in _LAYOUTS:
            if all(hasattr(module, n) for n in (*ins, out)):
                yield module, ins, out
                break


def install(model: Any) -> int:
    """Widen every unaligned vision MLP of ``model``; returns how many were widened."""
    changed = 0
    for module, ins, out in _mlps(model):
        width = getattr(module, out).in_features
        if getattr(module, "_chord_width", None) is not None or width % ALIGN == 0:
            continue
        if any(p.device.type == "meta" for p in module.parameters()):
            continue  # offloaded weights are loaded by accelerate's hooks: left as they are
        module._chord_width = width
        _resize(module, ins, out, -(-width // MULTIPLE) * MULTIPLE)
        changed += 1
    if changed:
        log.debug("vision MLP widened to an aligned width in %d block(s)", changed)
    return changed


@contextmanager
def disabled(model: Any) -> Iterator[None]:
    """The MLPs :func:`install` widened at their own width meanwhile."""
    changed = [(m, ins, out, getattr(m, out).in_features) for m, ins, out in _mlps(model)
               if getattr(m, "_chord_width", None) is not None]
    for m, ins, out, _ in changed:
        _resize(m, ins, out, m._chord_width)
    try:
        yield
    finally:
        for m, ins, out, wide in changed:
            _resize(m, ins, out, wide)


def _resize(module: Any, ins: tuple[str, ...], out: str, width: int) -> None:
    """``width`` intermediate units: the first ones kept, any added ones zero."""
    import torch

    def fit(t: Any, dim: int) -> Any:
        have = t.shape[dim]
        if have >= width:
            return t.narrow(dim, 0, width).contiguous()
        pad = list(t.shape)
        pad[dim] = width - have
        return torch.cat([t, t.new_zeros(pad)], dim=dim)

    for name in ins:
        lin = getattr(module, name)
        lin.weight = torch.nn.Parameter(fit(lin.weight.data, 0), requires_grad=False)
        if lin.bias is not None:
            lin.bias = torch.nn.Parameter(fit(lin.bias.data, 0), requires_grad=False)
        lin.out_features = width
    lin = getattr(module, out)
    lin.weight = torch.nn.Parameter(fit(lin.weight.data, 1), requires_grad=False)
    lin.in_features = width
    if hasattr(module, "intermediate_size"):
        module.intermediate_size = width
