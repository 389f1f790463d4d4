"""The matrix products' arithmetic of one forward pass, counted while it runs, so that a
timing can say how far it is from the card's compute roof.

Every ``nn.Linear`` the pass calls adds 2 × rows × in × out (rows as the call saw them: the
vision MLP at its aligned width, the language model's head at the one position it keeps), and
the patch embedding adds 2 × patches × its weight's size (a Conv3d whose windows tile the
input is that GEMM). Attention's own products are left out: at these lengths (≈ 330 tokens a
pair, windows of 64 patches, 4 full-attention layers of ≤ 2,880 patches) they are under 2 %
of a pass. The count splits the vision tower from the language model.

    from pass_flops import count
    flop = count(lm.model, lambda: lm.model(**inputs, use_cache=False, logits_to_keep=1))
    flop["total"] / seconds / 1e12   # TFLOP/s achieved
"""

from __future__ import annotations

from typing import Any, Callable


def count(model: Any, run: Callable[[], Any]) -> dict:
    """FLOPs of the products ``run()`` makes through ``model``'s modules: ``tower``,
    ``language`` (everything outside the vision tower) and ``total``."""
    import torch

    from chord_core.model.fastvision import vision_tower

    tower = vision_tower(model)
    in_tower = {id(m) for m in tower.modules()} if tower is not None else set()
    sums = {"tower": 0, "language": 0}

    def linear(module: Any, args: tuple, out: Any) -> None:
        rows = args[0].numel() // module.in_features
        sums["tower" if id(module) in in_tower else "language"] += \
            2 * rows * module.in_features * module.out_features

    def patches(module: Any, args: tuple, out: Any) -> None:
        rows = out.numel() // out.shape[-1]
        sums["tower" if id(module) in in_tower else "language"] += \
            2 * rows * module.proj.weight.numel()

    hooks = []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            hooks.append(module.register_forward_hook(linear))
        elif type(module).__name__.endswith("PatchEmbed") and hasattr(module, "proj"):
            hooks.append(module.register_forward_hook(patches))
    try:
        with torch.inference_mode():
            run()
    finally:
        for h in hooks:
            h.remove()
    return {**sums, "total": sums["tower"] + sums["language"]}


def achieved(flop: float, seconds: dict[str, float]) -> dict[str, float]:
    """TFLOP/s for each variant's time."""
    return {k: round(flop / s / 1e12, 3) for k, s in seconds.items() if s > 0}
