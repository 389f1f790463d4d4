"""The prefill's element-wise chains as fused kernels (on GPUs by default: :func:`wanted`).

Session 8's H100 profile of a 128-frame grounding prefill found ≈ 25 % of its 1.36 s in
element-wise kernels run one by one: each RMSNorm is seven of them (a float32 copy, square,
mean, rsqrt, multiply, a bf16 copy, the weight), each gated MLP three more around its
products (SiLU, the multiply), and every one reads and writes the whole activation. Here the
RMSNorm modules of the model (the language model's, the vision tower's, Qwen3-VL's per-head
q/k norms) and the SiLU-gated MLPs (``act(gate(x)) * up(x)``, then ``down``) get a forward
that runs the same arithmetic through ``torch.compile``: one kernel for the norm, one for
the activation and its multiply. So does the vision towers' rotary embedding, where
``fastvision`` runs the tower's attention (float32 copies of q and k, every layer, on every
patch: :func:`vision_rope`). The products stay the modules' own (bf16, or FP8 where
``CHORD_FP8`` gave them FP8 copies).

Only inputs of at least ``fp8.MIN_ROWS`` tokens take it (``fp8.prefill_sized``, the same
test as FP8's): decode steps (their own compiled graphs and CUDA graphs) and short inputs keep
the modules' forwards. The functions are compiled once per process on first use, with
dynamic shapes (a cold compile cache: seconds, on the first long prefill). On the CPU the same
functions run uncompiled unless asked (``install(model, compiled=True)``; the tests compare
both with the modules').

:func:`install` changes one loaded model (nothing global is patched); :func:`disabled` puts
the modules' own forwards back meanwhile, for benchmarks.
"""

from __future__ import annotations

import logging
import threading
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from chord_core.model.fp8 import MIN_ROWS, prefill_sized

log = logging.getLogger(__name__)

_compiled: dict[str, Callable[..., Any]] = {}
_compiling = threading.Lock()


def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """Qwen's RMSNorm, as its modules compute it (float32 statistics, the input's dtype
    before the weight)."""
    import torch

    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def silu_mul(gate: Any, up: Any) -> Any:
    import torch.nn.functional as F

    return F.silu(gate) * up


def vision_rope(q: Any, k: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
    """The vision rotary embedding as both towers (Qwen2.5-VL's, Qwen3-VL's) compute it
    (float32, each result back in its input's dtype). Unfused it is ≈ 14 kernels over
    float32 copies of q and k, every layer, on every patch."""
    import torch

    def turned(x: Any) -> Any:  # the second half negated, then the first
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    qf, kf = q.float(), k.float()
    c, s = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    return (qf * c + turned(qf) * s).to(q.dtype), (kf * c + turned(kf) * s).to(k.dtype)


class _Rope:
    """A vision attention module's rotary function (``fastvision`` calls it): fused for a
    prefill-sized input, else the tower's own."""

    def __init__(self, fused: Callable[..., Any], own: Callable[..., Any]) -> None:
        self.fused, self.own = fused, own

    def __call__(self, q: Any, k: Any, cos: Any, sin: Any) -> Any:
        return (self.fused if prefill_sized(q) else self.own)(q, k, cos, sin)


def _kernel(name: str, fn: Callable[..., Any], compiled: bool) -> Callable[..., Any]:
    if not compiled:
        return fn
    with _compiling:
        if name not in _compiled:
            _compiled[name] = _Guarded(name, fn)
        return _compiled[name]


class _Guarded:
    """``fn`` through torch.compile, or ``fn`` itself for good once compiling it failed
    (logged once): a GPU host whose compiler does not work (no Triton for its card, no C
    compiler) still answers, unfused, as the fast decoder's step does. Running out of
    memory is raised, not taken for a compile failure."""

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        import torch

        self.name, self.fn = name, fn
        self.compiled: Callable[..., Any] | None = torch.compile(fn, dynamic=True,
                                                                 fullgraph=True)

    def __call__(self, *args: Any) -> Any:
        import torch

        run = self.compiled
        if run is None:
            return self.fn(*args)
        try:
            return run(*args)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 — any compile failure: unfused from now on
            if self.compiled is not None:
                self.compiled = None
                log.warning("CHORD_FUSE: compiling %s failed, so it runs unfused from now on "
                            "(%s: %s)", self.name, type(exc).__name__, str(exc)[:300])
            return self.fn(*args)


def _norm_forward(self: Any, x: Any) -> Any:
    if prefill_sized(x):
        return self._chord_fused_norm(x, self.weight, self.variance_epsilon)
    return self._chord_unfused(x)


def _mlp_forward(self: Any, x: Any) -> Any:
    if prefill_sized(x):
        return self.down_proj(self._chord_fused_act(self.gate_proj(x), self.up_proj(x)))
    return self._chord_unfused(x)


def _is_norm(module: Any) -> bool:
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "variance_epsilon") \
        and getattr(module, "weight", None) is not None


def _is_silu_mlp(module: Any) -> bool:
    """``act(gate(x)) * up(x)`` then ``down``, with SiLU (torch's, or transformers' own
    ``SiLUActivation``, which calls it)."""
    return all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")) \
        and type(module.act_fn).__name__ in ("SiLU", "SiLUActivation")


def targets(model: Any) -> list[tuple[Any, str]]:
    """(module, "norm" | "mlp" | "rope") for every module this fuses: "rope" is a vision
    attention module with ``fastvision``'s forward, whose rotary function is fused."""
    return [(m, "norm" if _is_norm(m) else "mlp" if _is_silu_mlp(m) else "rope")
            for m in model.modules()
            if _is_norm(m) or _is_silu_mlp(m) or "_chord_rope" in m.__dict__]


def wanted(cfg: Any, device_kind: str) -> bool:
    """Whether a model loaded by ``cfg`` on ``device_kind`` ("cuda", "cpu", …) is fused:
    ``CHORD_FUSE`` (``cfg.fuse``) when set; else on a GPU unless the decode step is not
    compiled either (``cfg.compile`` False: a one-shot command, whose few long prefills do
    not repay the compile). On one H100 (2026-12-07, ``run_device.sh prefill-ab``) it made
    a 32-pair entailment pass 1.16× and a 128-frame grounding prefill 1.14× as fast, with
    the same 32 labels; the CPU keeps the modules' own code."""
    if cfg.fuse is not None:
        return bool(cfg.fuse)
    return device_kind == "cuda" and cfg.compile is not False


def install(model: Any, compiled: bool | None = None) -> int:
    """Give ``model``'s RMSNorms and SiLU-gated MLPs the fused forwards; returns how many.
    ``compiled``: through torch.compile (default: when the model is on a GPU)."""
    if compiled is None:
        param = next(model.parameters(), None)
        compiled = param is not None and param.device.type == "cuda"
    norm = _kernel("rms_norm", rms_norm, compiled)
    act = _kernel("silu_mul", silu_mul, compiled)
    rope = _kernel("vision_rope", vision_rope, compiled)
    found = targets(model)
    for module, kind in found:
        if kind == "rope":
            if not isinstance(module._chord_rope, _Rope):
                module._chord_rope = _Rope(rope, module._chord_rope)
            continue
        if "_chord_unfused" not in module.__dict__:
            module._chord_unfused = module.forward
        if kind == "norm":
            module._chord_fused_norm = norm
            module.forward = types.MethodType(_norm_forward, module)
        else:
            module._chord_fused_act = act
            module.forward = types.MethodType(_mlp_forward, module)
    log.info("CHORD_FUSE: %d RMSNorms, %d gated MLPs and %d vision rotary embeddings fused "
             "from %d tokens (%s)", sum(k == "norm" for _, k in found),
             sum(k == "mlp" for _, k in found), sum(k == "rope" for _, k in found), MIN_ROWS,
             "compiled" if compiled else "uncompiled on the CPU")
    return len(found)


def _fused_here(module: Any, kind: str) -> bool:
    return isinstance(module._chord_rope, _Rope) if kind == "rope" else \
        "_chord_unfused" in module.__dict__


def installed(model: Any) -> bool:
    return any(_fused_here(m, kind) for m, kind in targets(model))


@contextmanager
def disabled(model: Any, kinds: tuple[str, ...] = ("norm", "mlp", "rope")) -> Iterator[None]:
    """The modules' own forwards (and rotary functions) meanwhile, for the ``kinds`` given
    (benchmarks time both)."""
    changed = [(m, kind) for m, kind in targets(model) if kind in kinds and _fused_here(m, kind)]
    saved = [m._chord_rope if kind == "rope" else m.forward for m, kind in changed]
    for m, kind in changed:
        if kind == "rope":
            m._chord_rope = m._chord_rope.own
        else:
            m.forward = m._chord_unfused
    try:
        yield
    finally:
        for (m, kind), fused in zip(changed, saved):
            if kind == "rope":
                m._chord_rope = fused
            else:
                m.forward = fused
