"""Engine.warmup() prepares every decode shape a public request at the default settings can
reach — describe_many's batches, analyze (describe, per-frame grounding) and entailment —
so no request after it captures one (``FastDecoder.stats["captured_on_request"]``, counted
on the CPU as on CUDA); the plan is bounded by memory; the steps report as they go."""

from __future__ import annotations

import pytest

from chord_core.analysis import warmup as w
from chord_core.analysis.request import AnalysisRequest
from chord_core.config import ModelConfig
from chord_core.model import loading as m
from chord_core.model.fastgen import batch_bucket, length_bucket


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from chord_core.analysis.engine import Engine

    lm = m.load_model(ModelConfig(model="test", device="cpu"))
    return Engine(ModelConfig(model="test", device="cpu"), loaded=lm)


@pytest.fixture(scope="module")
def long_clips(tmp_path_factory):
    """Two 30 s 640×480 clips: at the default describe sampling (1 fps, full size) each
    prompt is ≈ 5.6k tokens, past what batches were captured for before (4,096)."""
    from chord_core.testing.videos import make_video

    d = tmp_path_factory.mktemp("long")
    long = [str(make_video(d / f"c{i}.mp4", duration_s=30.0, fps=2.0, size_wh=(640, 480),
                           seed=i).path) for i in range(2)]
    return long + [str(make_video(d / "short.mp4", duration_s=1.0, fps=4.0,
                                  size_wh=(160, 120)).path)]


def test_no_public_request_captures_a_graph_after_warmup(engine, long_clips):
    steps: list[tuple] = []
    out = engine.warmup(on_step=lambda detail, done, total: steps.append((detail, done, total)))
    dec = engine.load().decoder
    assert dec.stats["captured_on_request"] == 0 and out["total_s"] > 0
    assert any("capturing decode graphs" in s[0] for s in steps)
    assert any(s[1] is not None and s[1] == s[2] for s in steps)  # captures counted to the end
    many = engine.describe_many([AnalysisRequest(c, "describe", max_new_tokens=8)
                                 for c in long_clips[:2]], batch_size=2)
    assert all(r.sampling.visual_tokens > 4096 for r in many)  # a 2-row batch past 4,096
    engine.analyze(AnalysisRequest(long_clips[0], "describe", max_new_tokens=8))
    engine.analyze(AnalysisRequest(long_clips[2], "ground", query="a box"))
    engine.entail_many([AnalysisRequest(long_clips[2], "entail", query="a box is shown")])
    assert dec.stats["captured_on_request"] == 0


def test_graph_plan_covers_the_default_budget_and_every_padded_batch(engine):
    lm = engine.load()
    plan = w.graph_plan(lm, batch_size=32, free_bytes=1 << 50)
    assert set(plan) == {batch_bucket(b) for b in range(1, 33)}  # 1, 2, 4, 8, 16, 32
    assert set(plan.values()) == {length_bucket(24_000 + w.PROMPT_TEXT_TOKENS + 512)}


def test_graph_plan_shortens_the_largest_batches_to_fit_the_memory(engine):
    lm = engine.load()
    per_token = lm.decoder.kv_bytes(1, 1)
    free = int(10 * 32_768 * per_token / w.KV_SHARE)  # less than 15 rows × 32k
    plan = w.graph_plan(lm, batch_size=8, free_bytes=free)
    assert plan[1] == 32_768 and plan[8] < plan[4] <= plan[2] <= 32_768
    assert sum(r * (n + 8) * per_token for r, n in plan.items()) <= free * w.KV_SHARE
