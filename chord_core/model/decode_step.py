"""The arithmetic of one fast decode step (see ``fastgen``): module-level functions so that
``torch.compile`` compiles each once and every layer reuses it (modules and tensors are
arguments, not closures)."""

from __future__ import annotations


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


def _pre_attention(layer, h, cos, sin, rope, hd: int, n_kv: int, qkv_w, qkv_b, sizes):
    """Norm, q/k/v projection (one fused product), the per-head q/k RMS norms where the
    attention has them (Qwen3-VL: over head_dim, before the rotation, as its forward does)
    and rotary embedding of one new token per row; q comes out grouped by the key/value
    head its heads share ([B, n_kv, n_rep, hd])."""
    import torch.nn.functional as F

    b = h.shape[0]
    attn = layer.self_attn
    x = layer.input_layernorm(h)
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


def _post_attention(layer, h, o, gate_up_w):
    """Output projection, residual, norm, MLP (gate and up as one product), residual."""
    import torch.nn.functional as F

    h = h + layer.self_attn.o_proj(o)
    mlp = layer.mlp
    gate, up = F.linear(layer.post_attention_layernorm(h), gate_up_w).chunk(2, dim=-1)
    return h + mlp.down_proj(mlp.act_fn(gate) * up)


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


def _head_choose(norm, lm_head, h, presence, step, min_new, done, eos, penalty: float,
                 pad: int):
    """Final norm, vocabulary projection (float32 logits, as ``generate`` scores them) and
    the greedy choice."""
    logits = lm_head(norm(h))[:, -1].float()
    return choose(logits, presence, step, min_new, done, eos, penalty, pad)


_COMPILED: tuple | None = None


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


def functions(compiled: bool) -> tuple:
    """(pre-attention, attention, post-attention, head) — plain, or ``torch.compile``d:
    shared by every layer (modules are arguments, so one compiled graph serves all layers of
    the same shape; the batch and cache-length dimensions are dynamic). Inductor's caches go
    under the Chord cache dir, so a restarted worker reuses them."""
    global _COMPILED
    plain = (_pre_attention, _attend, _post_attention, _head_choose)
    if not compiled:
        return plain
    if _COMPILED is None:
        import os

        import torch

        from chord_core.config import default_cache_dir

        root = default_cache_dir() / "compile"
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(root / "inductor"))
        os.environ.setdefault("TRITON_CACHE_DIR", str(root / "triton"))
        # "duck sizing" would tie sizes that merely happen to be equal at the first trace
        # (two end tokens and a 2-row batch, say) and recompile when they part
        torch.fx.experimental._config.use_duck_shape = False
        dyn = torch._dynamo.config
        if hasattr(dyn, "recompile_limit"):
            dyn.recompile_limit = max(dyn.recompile_limit, 32)
        else:
            dyn.cache_size_limit = max(dyn.cache_size_limit, 32)
        _COMPILED = tuple(torch.compile(fn, dynamic=True, fullgraph=True) for fn in plain)
    return _COMPILED
