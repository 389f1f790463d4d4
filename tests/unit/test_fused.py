"""Fused prefill kernels (``CHORD_FUSE=1``, ``model/fused.py``): the norms and gated MLPs of
both families take the fused forward, which computes what the modules compute, compiled
(inductor on the CPU) or not; short inputs and decode steps keep the modules' own; the fast
decoder's tokens are unchanged; FP8 products stay in the MLPs it fuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from chord_core.config import ModelConfig, model_config_from_env
from chord_core.model import fp8, fused
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m
from tower import video_features


@pytest.fixture(scope="module", params=["test", "test-qwen3"], ids=["qwen2.5-vl", "qwen3-vl"])
def pair(request, tiny_model_dir):
    plain = m.load_model(ModelConfig(model=request.param, device="cpu"))
    fast = m.load_model(ModelConfig(model=request.param, device="cpu", fuse=True))
    return plain, fast


def test_the_setting() -> None:
    assert not model_config_from_env({}).fuse
    assert model_config_from_env({"CHORD_FUSE": "1"}).fuse


def test_norms_and_gated_mlps_of_both_towers_are_fused(pair) -> None:
    plain, fast = pair
    assert fused.installed(fast.model) and not fused.installed(plain.model)
    kinds = {(type(mod).__name__, kind) for mod, kind in fused.targets(fast.model)}
    text = fast.model.model.language_model
    assert {(type(text.norm).__name__, "norm"), (type(text.layers[0].mlp).__name__, "mlp")} \
        <= kinds
    layer_norms = [mod for mod, kind in fused.targets(fast.model) if kind == "norm"]
    assert text.layers[0].input_layernorm in layer_norms
    ropes = [mod for mod, kind in fused.targets(fast.model) if kind == "rope"]
    # fastvision's attention in both towers (Qwen3-VL's since session 13): its rotary fused
    assert len(ropes) == len(fast.model.model.visual.blocks)
    assert all(isinstance(mod._chord_rope, fused._Rope) for mod in ropes)
    with fused.disabled(fast.model):
        assert not any(isinstance(mod._chord_rope, fused._Rope) for mod in ropes)
    with fused.disabled(fast.model, kinds=("rope",)):  # the rotary alone put back
        assert not any(isinstance(mod._chord_rope, fused._Rope) for mod in ropes)
        assert text.layers[0].input_layernorm.forward.__func__ is fused._norm_forward
    assert fused.installed(fast.model)
    assert all(isinstance(mod._chord_rope, fused._Rope) for mod in ropes)


def test_the_vision_tower_runs_its_rotary_fused_and_matches(pair) -> None:
    plain, fast = pair
    rope = next(mod for mod, kind in fused.targets(fast.model) if kind == "rope")._chord_rope
    calls: list[int] = []
    real = rope.fused
    rope.fused = lambda *a: (calls.append(1), real(*a))[1]
    frames = np.random.default_rng(1).integers(0, 255, (4, 112, 168, 3), dtype=np.uint8)
    meta = {"total_num_frames": 4, "fps": 2.0, "frames_indices": list(range(4))}
    try:
        feats = [video_features(lm, model_inputs.build_video_inputs(lm, frames, meta, "D."))
                 for lm in (fast, plain)]
        assert calls  # 4 frames of 8 × 12 patches: 384 rows of patches, prefill-sized
        torch.testing.assert_close(feats[0], feats[1], rtol=1e-4, atol=1e-4)
    finally:
        rope.fused = real


@pytest.mark.parametrize("compiled", [
    False,
    # inductor's CPU compile is ≈ 12 s cold in the default tier's process: the slow tier's
    pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "inductor"])
def test_the_fused_functions_compute_what_the_modules_do(pair, compiled: bool) -> None:
    plain, _ = pair
    g = torch.Generator().manual_seed(0)
    found = [(mod, kind) for mod, kind in fused.targets(plain.model) if kind != "rope"]
    ropes = [mod for mod, kind in fused.targets(plain.model) if kind == "rope"][:1]
    for mod in ropes:  # the tower's own rotary function against the fused one, in bf16
        heads, dim = mod.num_heads, mod.head_dim
        q, k = (torch.randn(fused.MIN_ROWS, heads, dim, generator=g).bfloat16()
                for _ in range(2))
        cos, sin = (torch.randn(fused.MIN_ROWS, dim, generator=g) for _ in range(2))
        want = mod._chord_rope(q, k, cos, sin)  # unfused: transformers' function
        got = fused._kernel("vision_rope", fused.vision_rope, compiled)(q, k, cos, sin)
        assert got[0].dtype == got[1].dtype == torch.bfloat16
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=0, atol=0 if not compiled else 1e-2)
    for mod, kind in found[:6]:
        width = mod.weight.shape[0] if kind == "norm" else mod.gate_proj.in_features
        x = torch.randn(2, fused.MIN_ROWS, width, generator=g)
        with torch.inference_mode():
            want = mod(x)
            if kind == "norm":
                norm = fused._kernel("rms_norm", fused.rms_norm, compiled)
                got = norm(x, mod.weight, mod.variance_epsilon)
            else:
                act = fused._kernel("silu_mul", fused.silu_mul, compiled)
                got = mod.down_proj(act(mod.gate_proj(x), mod.up_proj(x)))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if compiled:  # inductor really ran: no compile failure fell back to the plain functions
        assert all(k.compiled is not None for k in fused._compiled.values())


def test_a_long_prefill_runs_fused_and_matches(pair) -> None:
    plain, fast = pair
    calls: list[int] = []
    real = fused.rms_norm

    vocab = plain.model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (1, fused.MIN_ROWS + 20),
                        generator=torch.Generator().manual_seed(2))
    first = fast.model.model.language_model.layers[0].input_layernorm
    first._chord_fused_norm = lambda *a: (calls.append(1), real(*a))[1]
    try:
        with torch.inference_mode():
            got = fast.model(input_ids=ids).logits
            assert calls  # the fused forward ran, not the module's
            torch.testing.assert_close(got, plain.model(input_ids=ids).logits,
                                       rtol=1e-4, atol=1e-4)
            calls.clear()
            short = ids[:, :30]
            assert torch.equal(fast.model(input_ids=short).logits,
                               plain.model(input_ids=short).logits)
            assert not calls  # a short input: the module's own forward
            with fused.disabled(fast.model):
                fast.model(input_ids=ids)
            assert not calls
    finally:
        first._chord_fused_norm = real


def test_decoding_is_unchanged(pair) -> None:
    plain, fast = pair
    frames = np.random.default_rng(0).integers(0, 255, (4, 56, 84, 3), dtype=np.uint8)
    meta = {"total_num_frames": 4, "fps": 2.0, "frames_indices": list(range(4))}
    a = model_inputs.build_video_inputs(plain, frames, meta, "Describe this clip.")
    b = model_inputs.build_video_inputs(fast, frames, meta, "Describe this clip.")
    assert fast.decoder.generate(b, 24).tolist() == plain.decoder.generate(a, 24).tolist()


def test_fused_mlps_keep_fp8_products(tiny_model_dir) -> None:
    both = m.load_model(ModelConfig(model="test", device="cpu", fuse=True, fp8=True))
    assert both.info.fp8 and fused.installed(both.model)
    mlp = both.model.model.language_model.layers[0].mlp
    seen: list[str] = []
    hooks = [getattr(mlp, n).register_forward_hook(lambda mod, a, o, n=n: seen.append(n))
             for n in ("gate_proj", "up_proj", "down_proj")]
    try:
        x = torch.randn(1, fp8.MIN_ROWS, mlp.gate_proj.in_features)
        with torch.inference_mode():
            mlp(x)
    finally:
        for h in hooks:
            h.remove()
    assert sorted(seen) == ["down_proj", "gate_proj", "up_proj"]  # the modules (FP8) ran
    assert "_chord_fp8_weight" in mlp.gate_proj.__dict__


@pytest.mark.parametrize(("fuse", "compile_", "kind", "expected"), [
    (None, None, "cuda", True),    # a service or the app on a GPU: fused
    (None, True, "cuda", True),
    (None, False, "cuda", False),  # a one-shot command (its decode step uncompiled too)
    (None, None, "cpu", False),    # the CPU keeps the modules' code
    (True, False, "cpu", True),    # CHORD_FUSE=1 wins
    (False, None, "cuda", False),  # CHORD_FUSE=0 wins
])
def test_fusing_is_the_gpu_default_where_the_decode_step_is_compiled(fuse, compile_, kind,
                                                                      expected):
    from chord_core.longvideo.settings import one_shot_config
    from chord_core.model.fused import wanted

    cfg = ModelConfig(model="test", fuse=fuse, compile=compile_)
    assert wanted(cfg, kind) is expected
    assert wanted(one_shot_config(ModelConfig(model="test")), "cuda") is False


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("1", True), ("0", False)])
def test_chord_fuse_reads_as_on_off_or_the_default(monkeypatch, value, expected):
    from chord_core.config import model_config_from_env

    if value is None:
        monkeypatch.delenv("CHORD_FUSE", raising=False)
    else:
        monkeypatch.setenv("CHORD_FUSE", value)
    assert model_config_from_env(model="test").fuse is expected


def test_a_compile_that_fails_leaves_the_prefill_unfused_and_right(pair, monkeypatch,
                                                                   caplog) -> None:
    """A GPU host whose compiler does not work (fused by default there) still answers: the
    first call's compile error is logged once and the plain functions run from then on."""
    plain, _ = pair
    calls: list[str] = []

    def broken_compile(fn, **_):
        def run(*args):
            calls.append(fn.__name__)
            raise RuntimeError("triton: no compiler for this GPU")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    monkeypatch.setattr(fused, "_compiled", {})
    model = m.load_model(ModelConfig(model=plain.info.id, device="cpu")).model
    fused.install(model, compiled=True)
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (1, fused.MIN_ROWS + 20),
                        generator=torch.Generator().manual_seed(3))
    with torch.inference_mode(), caplog.at_level("WARNING", logger="chord_core.model.fused"):
        got = model(input_ids=ids).logits
        again = model(input_ids=ids).logits
        want = plain.model(input_ids=ids).logits
    assert sorted(set(calls)) == ["rms_norm", "silu_mul"] and len(calls) == 2  # tried once
    assert sum("compiling" in r.message and "unfused" in r.message
               for r in caplog.records) == 2
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(got, again)
