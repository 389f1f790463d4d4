"""The fast decoder and the grouped vision attention compute what transformers computes.

On the CPU in float32 the two paths agree token for token (the kernels differ, the function
does not); the GPU agreement in bf16 is measured by benchmarks/speed.py."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest
import torch

from chord_core.config import ModelConfig
from chord_core.errors import ConfigError
from chord_core.model import fastgen, fastvision
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m
from chord_core.model.fastgen import (
    FastDecoder,
    batch_bucket,
    length_bucket,
    unsupported_reason,
)
from tower import video_features


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return m.load_model(ModelConfig(model="test", device="cpu"))


@pytest.fixture(scope="module", params=["test", "test-qwen3"], ids=["qwen2.5-vl", "qwen3-vl"])
def flm(request):
    """Each family's tiny model: Qwen3-VL's step adds per-head q/k norms, interleaved mrope
    and deepstack prefills, so agreement with ``generate`` is checked on both."""
    if request.param == "test":
        return request.getfixturevalue("lm")
    return m.load_model(ModelConfig(model=request.param, device="cpu"))


def _clip(rng, n=4, hw=(56, 84)):
    frames = rng.integers(0, 255, (n, *hw, 3), dtype=np.uint8)
    return frames, {"total_num_frames": n, "fps": 2.0, "frames_indices": list(range(n))}


def _reference(lm, inputs, tokens, **kw):
    with fastvision.disabled(lm.model), torch.inference_mode():
        out = lm.model.generate(**inputs, max_new_tokens=tokens, do_sample=False,
                                pad_token_id=lm.processor.tokenizer.pad_token_id, **kw)
    return out[:, inputs["input_ids"].shape[1]:]


def test_default_load_uses_the_fast_path_and_generate_opts_out(lm, tiny_model_dir):
    assert isinstance(lm.decoder, FastDecoder)
    assert not lm.decoder.compiled  # compile is for GPUs unless asked for
    plain = m.load_model(ModelConfig(model="test", device="cpu", decoder="generate"))
    assert plain.decoder is None
    with pytest.raises(ConfigError, match="unknown decoder"):
        ModelConfig(decoder="turbo")


def test_video_tokens_match_generate(flm):
    frames, meta = _clip(np.random.default_rng(0))
    inputs = model_inputs.build_video_inputs(flm, frames, meta, "Describe this clip.")
    ref = _reference(flm, inputs, 40)
    ours = flm.decoder.generate(inputs, 40)
    assert ours.tolist() == ref.tolist()


def test_batch_one_has_its_own_compiled_step_and_rows_graph(flm):
    dec = FastDecoder(flm.model, compile=True)
    assert dec.rows_for(1) == 1 and dec.rows_for(3) == 4
    # one-row functions compiled apart (their own inductor options), shared by decoders
    assert dec._one_row is not dec._rows
    assert FastDecoder(flm.model, compile=True)._one_row is dec._one_row
    assert {id(f) for f in dec._one_row}.isdisjoint(id(f) for f in dec._rows)


def test_a_lone_request_in_a_two_row_graph_matches_generate(flm):
    # the earlier layout (benchmarks time it against batch 1's own graph): a spare row idles
    dec = FastDecoder(flm.model, pad_token_id=flm.processor.tokenizer.pad_token_id)
    dec.min_rows = 2
    frames, meta = _clip(np.random.default_rng(5))
    inputs = model_inputs.build_video_inputs(flm, frames, meta, "Describe this clip.")
    ours = dec.generate(inputs, 30)
    assert set(dec._buffers) == {2} and ours.shape == (1, 30)
    assert ours.tolist() == _reference(flm, inputs, 30).tolist()


def test_chord_one_row_graphs_0_puts_a_lone_request_in_the_two_row_graph(lm, monkeypatch):
    """What a one-shot long-video command's workers get (``one_shot_env``): the loaded
    decoder's fewest rows is 2, so batch 1's own (tuned, compiled) pieces never run."""
    cfg = ModelConfig(model="test", device="cpu")
    # unset, whatever the environment this test runs in has
    monkeypatch.delenv("CHORD_ONE_ROW_GRAPHS", raising=False)
    assert fastgen.for_model(cfg, lm.model, lm.processor).rows_for(1) == 1
    monkeypatch.setenv("CHORD_ONE_ROW_GRAPHS", "0")
    dec = fastgen.for_model(cfg, lm.model, lm.processor)
    assert dec.min_rows == 2 and dec.rows_for(1) == 2 and dec.rows_for(3) == 4


def test_left_padded_batch_with_min_new_tokens_matches_generate(flm):
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, hw + (3,), dtype=np.uint8)
              for hw in ((56, 84), (84, 112), (56, 56))]
    inputs = model_inputs.build_image_inputs(flm, images, "the red car")
    assert len(set(inputs["attention_mask"].sum(-1).tolist())) == 3  # really padded
    ref = _reference(flm, inputs, 30, min_new_tokens=12)
    ours = flm.decoder.generate(inputs, 30, min_new_tokens=12)  # 3 rows → a 4-row graph
    assert ours.tolist() == ref.tolist()


def test_end_token_stops_a_row_and_pads_it_like_generate(flm):
    frames, meta = _clip(np.random.default_rng(2))
    inputs = model_inputs.build_video_inputs(flm, frames, meta, "Describe.")
    free = flm.decoder.generate(inputs, 24)[0].tolist()
    stop = free[5]  # make the 6th generated token an end token
    gen = flm.model.generation_config
    saved = gen.eos_token_id
    try:
        gen.eos_token_id = [stop]
        dec = FastDecoder(flm.model, pad_token_id=flm.processor.tokenizer.pad_token_id)
        ref = _reference(flm, inputs, 24)[0].tolist()
        ours = dec.generate(inputs, 24)[0].tolist()
        banned = dec.generate(inputs, 24, min_new_tokens=24)[0].tolist()
    finally:
        gen.eos_token_id = saved
    cut = free.index(stop) + 1
    assert ref == free[:cut] and ours[:cut] == ref
    assert set(ours[cut:]) <= {dec.pad}  # checked only every few steps: the rest is padding
    assert stop not in banned and len(banned) == 24  # min_new_tokens bans the end token


def test_teacher_forcing_reports_the_models_choice_on_a_given_path(flm):
    frames, meta = _clip(np.random.default_rng(3))
    inputs = model_inputs.build_video_inputs(flm, frames, meta, "Describe.")
    own = flm.decoder.generate(inputs, 20, min_new_tokens=20)
    assert flm.decoder.generate(inputs, 20, min_new_tokens=20, force_tokens=own).tolist() \
        == own.tolist()
    other = own.clone()
    other[0, 3] = (own[0, 3] + 1) % flm.decoder.vocab
    forced = flm.decoder.generate(inputs, 20, min_new_tokens=20, force_tokens=other)
    assert forced[0, :4].tolist() == own[0, :4].tolist()  # same up to the changed input
    assert forced.shape == own.shape


def test_cancel_stops_generation_early(lm):
    frames, meta = _clip(np.random.default_rng(4))
    inputs = model_inputs.build_video_inputs(lm, frames, meta, "Describe.")
    stop = threading.Event()
    stop.set()
    assert lm.decoder.generate(inputs, 64, min_new_tokens=64, cancel=stop).shape[1] < 64


def test_unsupported_generation_settings_fall_back_to_generate(lm, caplog):
    gen = lm.model.generation_config
    gen.no_repeat_ngram_size = 3
    try:
        assert "no_repeat_ngram_size" in unsupported_reason(lm.model)
        cfg = ModelConfig(model="test", device="cpu")
        assert fastgen.for_model(cfg, lm.model, lm.processor) is None
    finally:
        gen.no_repeat_ngram_size = None
    assert unsupported_reason(lm.model) is None


@pytest.mark.parametrize("n, want", [(1, 256), (256, 256), (257, 512), (2487 + 128, 3072),
                                     (11_800, 12_288), (32_768, 32_768), (40_000, 40_960)])
def test_length_bucket(n, want):
    assert length_bucket(n) == want


@pytest.mark.parametrize("n, want", [(1, 1), (2, 2), (3, 4), (5, 8), (8, 8), (9, 16)])
def test_batch_bucket(n, want):
    assert batch_bucket(n) == want


def test_describe_batch_equals_one_by_one_and_the_plain_path(flm):
    rng = np.random.default_rng(5)
    clips = [(*_clip(rng, n, hw), p) for n, hw, p in
             ((4, (56, 84), "hi"), (6, (84, 56), "describe it please"), (2, (56, 56), "x"))]
    batched = m.describe_batch(flm, clips, 30)
    single = [m.describe(flm, *c, 30) for c in clips]
    plain = replace(flm, decoder=None)
    with fastvision.disabled(flm.model):
        reference = m.describe_batch(plain, clips, 30)
    assert [o.text for o in batched] == [o.text for o in single] == [o.text for o in reference]
    assert [o.prompt_tokens for o in batched] == [o.prompt_tokens for o in single]


def test_grouped_vision_attention_is_bit_identical_to_the_window_loop(lm):
    rng = np.random.default_rng(6)
    clips = [(*_clip(rng, 4, (252, 448)), "a"), (*_clip(rng, 2, (140, 196)), "b")]
    inputs = model_inputs.build_video_batch(lm, clips)

    ours = video_features(lm, inputs)
    with fastvision.disabled(lm.model):
        loop = video_features(lm, inputs)
    assert torch.equal(ours, loop)


def test_grouped_attention_handles_mixed_span_lengths():
    torch.manual_seed(0)
    q, k, v = (torch.randn(40, 2, 8) for _ in range(3))
    cu = torch.tensor([0, 16, 32, 36, 40])  # lengths 16, 16, 4, 4
    out = fastvision.grouped_attention(q, k, v, cu, 0.35)
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), scale=0.35)
        torch.testing.assert_close(out[a:b], ref.transpose(0, 1))


def test_a_failing_compile_falls_back_to_the_plain_step(lm, caplog):
    frames, meta = _clip(np.random.default_rng(7))
    inputs = model_inputs.build_video_inputs(lm, frames, meta, "Describe.")
    want = lm.decoder.generate(inputs, 16).tolist()
    dec = FastDecoder(lm.model, pad_token_id=lm.processor.tokenizer.pad_token_id)

    def broken(*args, **kwargs):
        raise RuntimeError("inductor: no working C compiler")

    # as if torch.compile had produced this
    dec._one_row, dec.compiled = dec._one_row._replace(layer=broken), True
    assert dec.generate(inputs, 16).tolist() == want
    assert not dec.compiled and "decoding without torch.compile" in caplog.text


def test_an_error_in_the_plain_step_is_raised_not_retried(lm):
    frames, meta = _clip(np.random.default_rng(8))
    inputs = model_inputs.build_video_inputs(lm, frames, meta, "Describe.")
    dec = FastDecoder(lm.model, pad_token_id=lm.processor.tokenizer.pad_token_id)

    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    dec._one_row = dec._rows = dec._rows._replace(layer=broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        dec.generate(inputs, 8)


def test_grouped_vision_attention_hands_unexpected_calls_to_transformers(lm, caplog):
    module = next(mod for mod in lm.model.modules() if hasattr(mod, "_chord_original"))
    seq, dim = 16, module.qkv.in_features
    hidden = torch.randn(seq, dim)
    head = dim // module.num_heads
    emb = (torch.ones(seq, head), torch.zeros(seq, head))
    cu = torch.tensor([0, seq], dtype=torch.int32)
    with torch.inference_mode():
        want = module._chord_original(hidden, cu_seqlens=cu, position_embeddings=emb)
        got = module(hidden, cu, position_embeddings=emb)  # positional: not what it expects
    try:
        torch.testing.assert_close(got, want)
        assert "grouped vision attention off" in caplog.text
        assert module.forward == module._chord_original
    finally:
        fastvision.install(lm.model)  # back to grouped for the other tests


def test_warm_up_prepares_every_padded_batch_size(lm, monkeypatch):
    from chord_core.analysis.engine import Engine

    from chord_core.analysis import warmup

    asked = []
    monkeypatch.setattr(lm.decoder, "prepare", lambda sizes, max_len, **kw: asked.append(
        ({batch_bucket(b) for b in sizes}, max_len)))
    # this is about the sizes, not the fit: the host's free pages (page cache excluded) vary
    # from run to run, and below ≈ 3 GB the fit shortened the 32-row graph (CI, session 13)
    monkeypatch.setattr(warmup, "_free_bytes", lambda lm: 64 << 30)
    Engine(ModelConfig(model="test", device="cpu", batch_size=32), loaded=lm).warmup()
    # 16: batches of 9–16; every one up to the default visual-token budget's length
    assert asked == [({r}, 32_768) for r in (1, 2, 4, 8, 16, 32)]


def test_span_bounds_are_read_once_per_tensor_and_never_stale():
    """Every vision layer gets the same ``cu_seqlens`` tensor: its spans are read once (one
    host wait per forward, not one per layer); a new tensor — a new forward, perhaps at a
    freed tensor's address — is read again."""
    from collections import OrderedDict

    cache: OrderedDict = OrderedDict()
    for step in range(20):  # new tensors, some reusing freed memory and ids
        cu = torch.tensor([0, 4 + step % 3, 10 + step], dtype=torch.int32)
        want = tuple(int(x) for x in cu.tolist())
        assert fastvision._bounds(cu, cache) == want
        assert fastvision._bounds(cu, cache) == want  # the second read comes from the cache
        del cu
    assert len(cache) <= 8


def test_parts_prefilled_apart_decode_together_as_each_alone(flm):
    """Issue 36: parts of different prompt lengths (so with masked positions between a
    short part's prompt and the shared decode start) decode in one batch to the tokens each
    part gets alone, rows in the parts' order; and an iterator of parts is built lazily,
    each after the previous part's prefill."""
    rng = np.random.default_rng(7)
    a = model_inputs.build_video_batch(flm, [(*_clip(rng), "Describe this clip."),
                                             (*_clip(rng, n=2), "What happens?")])
    b = model_inputs.build_video_batch(flm, [(*_clip(rng, hw=(84, 112)), "Describe.")])
    assert b["input_ids"].shape[1] > a["input_ids"].shape[1]  # the later part is longer
    alone = torch.cat([flm.decoder.generate(x, 16, min_new_tokens=16) for x in (a, b)])
    built = []

    def lazily():
        for x in (a, b):
            built.append(len(built))
            yield x

    together = flm.decoder.generate(lazily(), 16, min_new_tokens=16)
    assert together.tolist() == alone.tolist() and built == [0, 1]
    with pytest.raises(ValueError, match="one processor output"):
        flm.decoder.generate([a, b], 4, force_tokens=together[:, :4])


def test_rope_positions_from_the_host_decode_as_the_models_own(flm):
    """The decoder works Qwen's 3-D positions and each row's offset out on the host (no wait
    on the GPU per row): images of two sizes in one left-padded batch (different offsets)
    give generate's tokens, and the host path was taken (checked once against the model's
    own, else it would be off)."""
    rng = np.random.default_rng(11)
    images = [rng.integers(0, 255, hw + (3,), dtype=np.uint8) for hw in ((56, 84), (112, 56))]
    inputs = model_inputs.build_image_inputs(flm, images, "the square")
    dec = FastDecoder(flm.model, pad_token_id=flm.processor.tokenizer.pad_token_id)
    ours = dec.generate(inputs, 24)
    assert getattr(dec, "_chord_host_positions", None) is True
    assert ours.tolist() == _reference(flm, inputs, 24).tolist()
    off = FastDecoder(flm.model, pad_token_id=flm.processor.tokenizer.pad_token_id)
    object.__setattr__(off, "_chord_host_positions", False)  # the model's own, as before
    assert off.generate(inputs, 24).tolist() == ours.tolist()
