"""Vision-tower attention without the per-window Python loop.

Qwen2.5-VL's vision tower attends within 112-px windows in most layers and within each frame
pair in the rest. Without flash-attn installed, transformers runs that as one SDPA call per
window: a 30-frame 448×252 clip makes ≈ 5,000 calls per forward, a 1036×588 one ≈ 25,000, and
the GPU waits on Python (the first H200 profile: 0.25 s of prefill per W1 clip against ≈ 0.09 s
of arithmetic). Qwen3-VL's tower attends within each frame pair in every layer, one SDPA call
per frame pair the same way. Here spans of the same length are gathered and attended in ONE
SDPA call per length — the same function per span (no span sees another), so the outputs
match the loop's (the tests compare them, for both towers).

On a GPU whose torch has ``torch.nn.attention.varlen`` (2.10 and later: flash attention over
packed spans), a layer's spans are attended by ONE kernel on the tensors as they are, with the
window bounds themselves (:func:`attend`): no gather into windows, no scatter back, one launch
instead of one per length. That kernel failing once (a card flash attention does not support)
sends every later call to the grouped SDPA, with a warning.

:func:`install` swaps the ``forward`` of the vision attention modules of one loaded model
(nothing global is patched); models that already use a flash-attention implementation keep
theirs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import types
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger(__name__)

_CLASS_NAMES = ("Qwen2_5_VLVisionAttention", "VisionSdpaAttention", "VisionAttention",
                "Qwen3VLVisionAttention", "Qwen3VLMoeVisionAttention")


def install(model: Any) -> int:
    """Give every vision attention module of ``model`` the grouped forward. Returns how many
    modules were changed (0 when the model has no such tower or uses flash attention)."""
    visual = vision_tower(model)
    if visual is None:
        return 0
    changed = 0
    shared: OrderedDict = OrderedDict()  # layouts seen by every layer of this tower
    for module in visual.modules():
        if type(module).__name__ not in _CLASS_NAMES or not hasattr(module, "qkv"):
            continue
        if hasattr(module, "_chord_original"):  # installed before: re-enable, never wrap twice
            module.forward = types.MethodType(_grouped_forward, module)
            changed += 1
            continue
        impl = getattr(getattr(module, "config", None), "_attn_implementation", "sdpa") or ""
        if "flash" in impl:
            continue
        rope = getattr(sys.modules.get(type(module).__module__), "apply_rotary_pos_emb_vision",
                       None)
        if rope is None:
            continue
        module._chord_rope = rope
        module._chord_index = shared
        module._chord_original = module.forward
        module.forward = types.MethodType(_grouped_forward, module)
        changed += 1
    return changed


def vision_tower(model: Any) -> Any:
    """The vision tower of a loaded Qwen-VL model (``model.model.visual`` or
    ``model.visual``), or None."""
    return getattr(getattr(model, "model", model), "visual", None) or \
        getattr(model, "visual", None)


@contextmanager
def disabled(model: Any) -> Iterator[None]:
    """Run the modules :func:`install` changed with transformers' own forward meanwhile
    (benchmarks time the naive path on the same weights)."""
    changed = [m for m in model.modules() if hasattr(m, "_chord_original")]
    for m in changed:
        m.forward = m._chord_original
    try:
        yield
    finally:
        for m in changed:
            m.forward = types.MethodType(_grouped_forward, m)


def _grouped_forward(self: Any, hidden_states: Any, *args: Any, **kwargs: Any):
    """The module's own projections and rotary function; attention grouped by window length.
    A call this was not written for (another transformers version's arguments, say) goes to
    transformers' own forward from then on, with a warning: never a failed request."""
    import torch

    cu_seqlens, position_embeddings = kwargs.get("cu_seqlens"), kwargs.get("position_embeddings")
    try:
        if args or cu_seqlens is None or position_embeddings is None:
            raise TypeError(f"unexpected arguments {len(args)} positional, {sorted(kwargs)}")
        return _grouped(self, hidden_states, cu_seqlens, position_embeddings)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 — fall back to the loop transformers ships
        log.warning("grouped vision attention off for this module (%s: %s)",
                    type(exc).__name__, exc)
        self.forward = self._chord_original
        return self._chord_original(hidden_states, *args, **kwargs)


def _grouped(self: Any, hidden_states: Any, cu_seqlens: Any, position_embeddings: Any):
    seq = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(seq, 3, self.num_heads, -1).permute(1, 0, 2, 3) \
        .unbind(0)
    cos, sin = position_embeddings
    q, k = self._chord_rope(q, k, cos, sin)
    out = attend(q, k, v, cu_seqlens, self.scaling, self._chord_index)
    return self.proj(out.reshape(seq, -1))


VARLEN = True  # benchmarks turn it off to time the grouped SDPA on the same weights
_varlen_broken: list[str] = []  # why the varlen kernel was given up on, once it failed


def attend(q: Any, k: Any, v: Any, cu_seqlens: Any, scale: float,
           cache: OrderedDict | None = None) -> Any:
    """Attention of [seq, heads, dim] tensors within each [cu[i], cu[i+1]) span: the varlen
    flash kernel where :func:`_varlen_for` offers it, else :func:`grouped_attention`."""
    import torch

    kernel = _varlen_for(q)
    if kernel is not None and q.shape[0]:
        bounds = _bounds(cu_seqlens, cache)
        longest = max((b - a for a, b in zip(bounds[:-1], bounds[1:])), default=0)
        cu = cu_seqlens.to(device=q.device, dtype=torch.int32)  # as it is, when it is so
        try:
            return kernel(q, k, v, cu, cu, longest, longest, scale=scale)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 — an unsupported card: the grouped SDPA
            _varlen_broken.append(f"{type(exc).__name__}: {str(exc)[:300]}")
            log.warning("varlen vision attention failed, so the grouped SDPA runs from now "
                        "on (%s)", _varlen_broken[0])
    return grouped_attention(q, k, v, cu_seqlens, scale, cache)


def _varlen_for(t: Any) -> Any:
    """``torch.nn.attention.varlen.varlen_attn`` for a CUDA tensor of half precision, when
    this torch has it (with a ``scale``: 2.10 and later) and it has not failed; else None."""
    import torch

    if not VARLEN or _varlen_broken or not t.is_cuda or \
            t.dtype not in (torch.bfloat16, torch.float16):
        return None
    return _varlen_kernel()


@functools.lru_cache(maxsize=1)
def _varlen_kernel() -> Any:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn if "scale" in inspect.signature(varlen_attn).parameters else None


def grouped_attention(q: Any, k: Any, v: Any, cu_seqlens: Any, scale: float,
                      cache: OrderedDict | None = None) -> Any:
    """Attention of [seq, heads, dim] tensors within each [cu[i], cu[i+1]) span, one SDPA call
    per distinct span length. ``cache`` keeps the gather indices of recent layouts (the same
    layout repeats in every layer of one forward), and the spans of the ``cu_seqlens`` tensor
    itself: every layer gets the same tensor, and reading it back from the GPU once per
    layer would make the host wait for the GPU 32 times a forward."""
    import torch
    import torch.nn.functional as F

    bounds = _bounds(cu_seqlens, cache)
    groups = cache.get(bounds) if cache is not None else None
    if groups is None:
        spans: dict[int, list[int]] = {}
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                spans.setdefault(b - a, []).append(a)
        groups = []
        for length, starts in spans.items():
            idx = (torch.tensor(starts)[:, None] + torch.arange(length)[None]).reshape(-1)
            whole = len(starts) == 1 and length == q.shape[0]
            groups.append((length, len(starts), None if whole else idx.to(q.device)))
        if cache is not None:
            cache[bounds] = groups
            while len(cache) > 8:
                cache.popitem(last=False)
    heads, dim = q.shape[1], q.shape[2]
    if len(groups) == 1 and groups[0][2] is None:  # one span covering everything
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                           v.transpose(0, 1)[None], scale=scale)
        return o[0].transpose(0, 1)
    out = torch.empty_like(q)
    for length, count, idx in groups:
        def gather(t):
            return t.index_select(0, idx).view(count, length, heads, dim).transpose(1, 2)

        o = F.scaled_dot_product_attention(gather(q), gather(k), gather(v), scale=scale)
        out.index_copy_(0, idx, o.transpose(1, 2).reshape(count * length, heads, dim))
    return out


def _bounds(cu_seqlens: Any, cache: OrderedDict | None) -> tuple[int, ...]:
    """``cu_seqlens`` as ints, read once per tensor object (a new forward's tensor, even at a
    reused address, is read again: the entry holds a weak reference to its own tensor)."""
    key = ("tensor", id(cu_seqlens))
    hit = cache.get(key) if cache is not None else None
    if hit is not None and hit[0]() is cu_seqlens:
        return hit[1]
    bounds = tuple(int(x) for x in cu_seqlens.tolist())
    if cache is not None:
        cache[key] = (weakref.ref(cu_seqlens), bounds)
        while len(cache) > 8:
            cache.popitem(last=False)
    return bounds
