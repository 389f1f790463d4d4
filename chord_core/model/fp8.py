"""FP8 matrix products for the language model's prefill (opt-in: ``CHORD_FP8=1``).

A 32-pair entailment request and a 128-frame grounding job spend most of their GPU time in
the prefill, and the prefill's time in the seven projections of each decoder layer (q, k, v,
o, gate, up, down). On Hopper (compute capability 9.0; 8.9 has FP8 too) a product of
``float8_e4m3fn`` operands runs at twice bf16's peak. Here each of those projections keeps
its bf16 weight (the fast decoder's fused weights are views of it, and short inputs use it)
and gains an FP8 copy with one scale per output channel; an input of at least
``MIN_ROWS`` tokens is scaled per token to the FP8 range and multiplied with
``torch._scaled_mm`` (row-wise scales), giving the input's dtype back. Decode steps (one
token a row, at most a few hundred rows) and short prompts keep the bf16 product, so the
decode step's captured graphs are unchanged.

It changes answers, as any quantisation does (e4m3 keeps 3 mantissa bits; the per-token and
per-channel scales keep the error relative): it is a setting, off by default, and a result
made with it says so (``model.fp8``). It costs one byte a weight of GPU memory beside the
bf16 weights (≈ 6.5 GB for a 7B). The vision tower, the embeddings and the LM head stay in
bf16.

:func:`install` converts one loaded model in place (nothing global is patched); it runs on a
CPU too (PyTorch has a CPU ``_scaled_mm``; the tests use it there), and declines, with the
reason, on a GPU without FP8 products or a model dispatched over several devices by hooks.
"""

from __future__ import annotations

import logging
import types
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger(__name__)

MIN_ROWS = 256  # tokens in one product: below this the bf16 weight is used (decode steps)
E4M3_MAX = 448.0  # the largest finite float8_e4m3fn
ALIGN = 16  # _scaled_mm wants both of the weight's dimensions a multiple of this
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def unsupported_reason(model: Any) -> str | None:
    """Why FP8 products cannot be used for this model here (None = they can)."""
    import torch

    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return f"this PyTorch ({torch.__version__}) has no float8_e4m3fn / _scaled_mm"
    param = next(model.parameters(), None)
    if param is None:
        return "the model has no weights"
    if param.device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(param.device)
        if (major, minor) < (8, 9):
            return (f"{torch.cuda.get_device_name(param.device)} (compute capability "
                    f"{major}.{minor}) has no FP8 matrix products; they need 8.9 or newer "
                    "(L4, L40S, H100, H200)")
    elif param.device.type != "cpu":
        return f"FP8 products run on CUDA GPUs and the CPU, not {param.device.type}"
    return None


def projections(model: Any) -> list[Any]:
    """The language model's per-layer projections FP8 can take (linear, aligned sizes)."""
    import torch

    inner = getattr(getattr(model, "model", None), "language_model", None)
    out = []
    for layer in getattr(inner, "layers", ()):
        for parent, names in ((getattr(layer, "self_attn", None), _ATTN),
                              (getattr(layer, "mlp", None), _MLP)):
            for name in names:
                lin = getattr(parent, name, None)
                if isinstance(lin, torch.nn.Linear) and \
                        lin.in_features % ALIGN == 0 and lin.out_features % ALIGN == 0:
                    out.append(lin)
    return out


def quantize_weight(weight: Any) -> tuple[Any, Any]:
    """(FP8 weight [out, in], float32 scale [1, out]): one scale per output channel, the
    channel's largest magnitude mapped to E4M3_MAX."""
    import torch

    w = weight.detach().float()
    scale = (w.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=1e-12)
    q = (w / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.reshape(1, -1).contiguous()


def fp8_linear(x: Any, q: Any, w_scale: Any, bias: Any) -> Any:
    """``x @ W.T + b`` with x scaled per row (token) to FP8 and W its FP8 copy."""
    import torch

    rows = x.reshape(-1, x.shape[-1])
    # the row maxima as one reduction (no |x| copy); the scale in x's dtype, so the division
    # makes no float32 copy of x, and _scaled_mm gets the same (rounded) scale back
    amax = torch.linalg.vector_norm(rows, float("inf"), dim=1, keepdim=True)
    scale = (amax.float() / E4M3_MAX).clamp(min=1e-12).to(x.dtype)
    xq = (rows / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    cuda = xq.is_cuda  # CUDA's row-wise scaling gives bf16 only; fast accumulation there
    out = torch._scaled_mm(xq, q.t(), scale_a=scale.float(), scale_b=w_scale,
                           out_dtype=torch.bfloat16 if cuda else x.dtype,
                           use_fast_accum=cuda).to(x.dtype)
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], q.shape[0])


def prefill_sized(x: Any) -> bool:
    """``x`` holds at least ``MIN_ROWS`` tokens: a prefill's input, not a decode step's."""
    return x.numel() >= MIN_ROWS * x.shape[-1]


def _forward(self: Any, x: Any) -> Any:
    import torch.nn.functional as F

    if prefill_sized(x):
        return fp8_linear(x, self._chord_fp8_weight, self._chord_fp8_scale, self.bias)
    return F.linear(x, self.weight, self.bias)


def install(model: Any) -> int:
    """Give the language model's projections FP8 copies and the forward above. Returns how
    many were converted (0, with the reason logged, where FP8 cannot run)."""
    reason = unsupported_reason(model)
    if reason is None and any(hasattr(m, "_hf_hook") for m in model.modules()):
        reason = "the model is dispatched over several devices by accelerate's hooks"
    if reason is not None:
        log.warning("CHORD_FP8: bf16 products kept: %s", reason)
        return 0
    changed = 0
    for lin in projections(model):
        if "_chord_fp8_weight" not in lin.__dict__:
            q, scale = quantize_weight(lin.weight)
            # plain attributes, not buffers: the model's state dict stays the checkpoint's
            lin.__dict__["_chord_fp8_weight"] = q
            lin.__dict__["_chord_fp8_scale"] = scale
        lin.forward = types.MethodType(_forward, lin)
        changed += 1
    log.info("CHORD_FP8: %d projections of the language model take FP8 products from %d "
             "tokens", changed, MIN_ROWS)
    return changed


def installed(model: Any) -> bool:
    return any("_chord_fp8_weight" in lin.__dict__ for lin in projections(model))


@contextmanager
def disabled(model: Any) -> Iterator[None]:
    """The bf16 products meanwhile, on the same weights (benchmarks time both)."""
    changed = [lin for lin in projections(model) if "_chord_fp8_weight" in lin.__dict__]
    for lin in changed:
        del lin.forward  # the class's own forward again
    try:
        yield
    finally:
        for lin in changed:
            lin.forward = types.MethodType(_forward, lin)
