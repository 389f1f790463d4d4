"""The arithmetic of one fast decode step (see ``fastgen``): module-level functions so that
``torch.compile`` compiles each once and every layer reuses it (modules and tensors are
arguments, not closures).

A layer maps (residual stream, its normed input) to the same pair for the next layer; its
MLP output joins the stream, fused with the next norm (the final norm after the last layer).
With two or more rows it is ONE compiled graph on cuBLAS products. At one row (batch 1) it
is three graphs compiled with inductor's coordinate-descent tuning, under which inductor
writes each one-row product as a Triton matrix-vector reduction instead of calling cuBLAS:
on an H200 that reads the gate/up weights at 4.3–4.5 TB/s against ≈ 3.8 through cuBLAS. Fused
with the code that computes its input, such a reduction recomputes that input (the norm,
the activation) in every program, which made it twice as slow, so the graphs are cut just
before the products whose input is computed in Triton: ``attention_out`` (q/k/v, rotation,
cache write, attention, output projection, residual, norm), ``mlp_up`` (gate/up,
activation), ``down_next`` (down, residual, the next norm). A CUDA graph replays the
kernels of all of them back to back, so the cuts cost nothing at run time; each compiled
graph costs a warm worker start its tracing (≈ 0.6 s on an H200 host), hence one graph where
nothing is won by cutting. ``benchmarks/decode_kernels.py`` measures these choices.
"""

from __future__ import annotations

from typing import Any, NamedTuple


def fuse_projections(layer) -> tuple:
    """One weight for q/k/v and one for gate/up, so each is one matrix product per step
    (a batch-1 step is a chain of matrix-vector products: fewer, larger ones read memory
    better and launch less). The layer's own q/k/v and gate/up parameters become row views
    of the fused tensors — same values, no second copy — so the model's forward is
    unchanged. Returns (qkv weight, qkv bias or None, split sizes, gate_up weight)."""
    import torch

    if "_chord_fused" in layer.__dict__:  # a second decoder on the same model
        return layer.__dict__["_chord_fused"]

    def fuse(linears):
        weight = torch.cat([lin.weight.data for lin in linears])
        has_bias = all(lin.bias is not None for lin in linears)
        bias = torch.cat([lin.bias.data for lin in linears]) if has_bias else None
        start = 0
        for lin in linears:
            rows = lin.weight.shape[0]
            lin.weight.data = weight[start:start + rows]
            if bias is not None:
                lin.bias.data = bias[start:start + rows]
            start += rows
        return weight, bias

    attn, mlp = layer.self_attn, layer.mlp
    projections = (attn.q_proj, attn.k_proj, attn.v_proj)
    qkv_w, qkv_b = fuse(projections)
    gate_up_w, _ = fuse((mlp.gate_proj, mlp.up_proj))
    fused = (qkv_w, qkv_b, tuple(p.weight.shape[0] for p in projections), gate_up_w)
    layer.__dict__["_chord_fused"] = fused  # plain attribute: not a parameter or buffer
    return fused


def mark_static(tensors) -> None:
    """Tell the compiler these tensors' shapes never change (fused weights, the end-token
    list): under ``dynamic=True`` every input dimension is otherwise a symbol, which makes
    tracing slower and the kernels generic."""
    import torch

    for t in tensors:
        if t is not None:
            torch._dynamo.mark_static(t)


def _pre_attention(layer, x, cos, sin, rope, hd: int, n_kv: int, qkv_w, qkv_b, sizes):
    """q/k/v projection of the normed input (one fused product), the per-head q/k RMS norms
    where the attention has them (Qwen3-VL: over head_dim, before the rotation, as its
    forward does) and rotary embedding of one new token per row; q comes out grouped by the
    key/value head its heads share ([B, n_kv, n_rep, hd])."""
    import torch.nn.functional as F

    b = x.shape[0]
    attn = layer.self_attn
    q, k, v = F.linear(x, qkv_w, qkv_b).split(list(sizes), dim=-1)
    q = q.reshape(b, 1, -1, hd)
    k = k.reshape(b, 1, -1, hd)
    if getattr(attn, "q_norm", None) is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = q.transpose(1, 2)
    k = k.transpose(1, 2)
    v = v.reshape(b, 1, -1, hd).transpose(1, 2)
    q, k = rope(q, k, cos, sin)
    return q.reshape(b, n_kv, -1, hd), k, v


def _attend(q, kc, vc, mask, scale: float):
    """Attention of the new token(s) over the cache: [B, n_kv, n_rep, hd] queries against
    [B, n_kv, L, hd] keys/values, ``mask`` [B, 1, 1, L] (True = attend). Written as two
    batched matrix products around a float32 softmax: a fused attention kernel would run
    one thread block per (row, kv head) — 4 blocks for a 7B model at batch 1 — while the
    products spread over the whole cache length."""
    import torch

    scores = torch.matmul(q, kc.transpose(-1, -2)).float() * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(-1).to(vc.dtype), vc)


def _attention_out(layer, h, x, kc, vc, cur, cos, sin, mask, rope, hd: int, n_kv: int, qkv_w,
                   qkv_b, sizes):
    """q/k/v of the normed input ``x`` and rotation, the new key/value written into the
    full-size caches ``kc``/``vc`` at index ``cur`` (fused with the rotation), attention over
    the first ``mask.shape[-1]`` positions, output projection, residual, post-attention
    norm: (residual stream, MLP input)."""
    q, k, v = _pre_attention(layer, x, cos, sin, rope, hd, n_kv, qkv_w, qkv_b, sizes)
    kc.index_copy_(2, cur, k)
    vc.index_copy_(2, cur, v)
    length = mask.shape[-1]
    o = _attend(q, kc[:, :, :length], vc[:, :, :length], mask, layer.self_attn.scaling)
    h = h + layer.self_attn.o_proj(o.reshape(h.shape[0], 1, -1))
    return h, layer.post_attention_layernorm(h)


def _mlp_up(layer, x, gate_up_w):
    """Gate and up as one product, then the activation: the down projection's input."""
    import torch.nn.functional as F

    gate, up = F.linear(x, gate_up_w).chunk(2, dim=-1)
    return layer.mlp.act_fn(gate) * up


def _down_next(layer, a, h, next_norm):
    """Down projection, residual, and the next layer's input norm (or the final norm):
    (residual stream, next normed input)."""
    h = h + layer.mlp.down_proj(a)
    return h, next_norm(h)


def choose(logits, presence, step, min_new, done, eos, penalty: float, pad: int):
    """Greedy choice after the processors ``generate`` would apply: repetition penalty
    (on tokens seen), no end token before ``min_new`` tokens; finished rows get ``pad``."""
    import torch

    if penalty != 1.0:
        penalised = torch.where(logits < 0, logits * penalty, logits / penalty)
        logits = torch.where(presence, penalised, logits)
    if eos is not None:
        ban = (step < min_new).view(1, 1)
        logits = logits.index_copy(1, eos, torch.where(ban, float("-inf"),
                                                       logits.index_select(1, eos)))
    return torch.where(done, pad, logits.argmax(-1))


def _head_choose(lm_head, x, presence, step, min_new, done, eos, penalty: float, pad: int):
    """Vocabulary projection of the final norm's output (float32 logits, as ``generate``
    scores them) and the greedy choice."""
    logits = lm_head(x)[:, -1].float()
    return choose(logits, presence, step, min_new, done, eos, penalty, pad)


def _in_pieces(attention_out, mlp_up, down_next):
    """One decoder layer, (residual stream, normed input) → the same for the next, from its
    three pieces: compiled whole when the pieces are the plain functions, or run piece by
    piece when they are compiled apart."""

    def layer_fn(layer, h, x, kc, vc, cur, cos, sin, mask, rope, hd: int, n_kv: int, qkv_w,
                 qkv_b, sizes, gate_up_w, next_norm):
        h, x = attention_out(layer, h, x, kc, vc, cur, cos, sin, mask, rope, hd, n_kv, qkv_w,
                             qkv_b, sizes)
        return down_next(layer, mlp_up(layer, x, gate_up_w), h, next_norm)

    return layer_fn


_layer = _in_pieces(_attention_out, _mlp_up, _down_next)


class StepFunctions(NamedTuple):
    """A decode step's layer and head functions, plain or compiled; ``layer`` has the
    signature of ``_layer``."""

    layer: Any
    head: Any


PLAIN = StepFunctions(_layer, _head_choose)
_COMPILED: tuple[StepFunctions, StepFunctions] | None = None


def compile_stats() -> dict[str, float]:
    """What compiling cost this process so far: graphs compiled and the persistent caches'
    hits and misses (a restart with a warm cache shows hits, no misses)."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return {}
    c = utils.counters
    return {"compiled_graphs": float(c["stats"]["unique_graphs"]),
            "fx_cache_hits": float(c["inductor"]["fxgraph_cache_hit"]),
            "fx_cache_misses": float(c["inductor"]["fxgraph_cache_miss"]),
            "aot_cache_hits": float(c["aot_autograd"]["autograd_cache_hit"]),
            "aot_cache_misses": float(c["aot_autograd"]["autograd_cache_miss"])}


def compile_cache_env() -> None:
    """Point inductor's and Triton's caches under the Chord cache dir (a user's own
    ``TORCHINDUCTOR_CACHE_DIR`` / ``TRITON_CACHE_DIR`` win), so a restarted worker finds what
    the last start compiled. Called before torch is imported (the worker's set-up, a model
    load): the first time anything of inductor asks for its cache dir, inductor sets the
    variable itself, to ``/tmp/torchinductor_<user>``, and a setdefault after that moment
    would keep the compiled graphs where a container restart loses them. Their keys are
    inductor's: the graph, the inputs' shapes and dtypes, the inductor config and torch's
    own build hash, so a model of another shape or dtype, or another torch, compiles anew
    beside them instead of reusing a wrong entry (tests/integration/test_compile_cache.py)."""
    import os

    from chord_core.config import default_cache_dir

    root = default_cache_dir() / "compile"
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(root / "triton"))


def functions(compiled: bool) -> tuple[StepFunctions, StepFunctions]:
    """The step functions for (one row, more rows): plain, or ``torch.compile``d — shared by
    every layer (modules are arguments, so one compiled graph serves all layers of the same
    shape; the cache length, and beyond one row the batch, are dynamic). The one-row layer
    runs in three pieces compiled with coordinate-descent tuning (module docstring): six
    compiled graphs in all. Inductor's caches go under the Chord cache dir, so a restarted
    worker reuses them."""
    global _COMPILED
    if not compiled:
        return PLAIN, PLAIN
    if _COMPILED is None:
        import torch

        compile_cache_env()  # already done at the load's start; an engine given a model too
        # "duck sizing" would tie sizes that merely happen to be equal at the first trace
        # (two end tokens and a 2-row batch, say) and recompile when they part
        torch.fx.experimental._config.use_duck_shape = False
        dyn = torch._dynamo.config
        if hasattr(dyn, "recompile_limit"):
            dyn.recompile_limit = max(dyn.recompile_limit, 32)
        else:
            dyn.cache_size_limit = max(dyn.cache_size_limit, 32)

        def compiled(fn, **options):
            return torch.compile(fn, dynamic=True, fullgraph=True, options=options or None)

        tuned = {"coordinate_descent_tuning": True}
        one_row = StepFunctions(
            _in_pieces(*(compiled(fn, **tuned) for fn in (_attention_out, _mlp_up, _down_next))),
            compiled(_head_choose, **tuned))
        _COMPILED = (one_row, StepFunctions(compiled(_layer), compiled(_head_choose)))
    return _COMPILED
