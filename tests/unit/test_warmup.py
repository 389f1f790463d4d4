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


def _lengths(sampling=None):
    """(describe's longest request, one grounding image's) at the default settings."""
    from chord_core.config import MAX_NEW_TOKENS_DEFAULT, PATCH_PX, SamplingConfig

    s = sampling or SamplingConfig()
    return (length_bucket(s.token_budget + w.PROMPT_TEXT_TOKENS + MAX_NEW_TOKENS_DEFAULT),
            length_bucket(s.ground_max_pixels // (PATCH_PX * PATCH_PX) + w.PROMPT_TEXT_TOKENS
                          + w.GROUND_NEW_TOKENS))


@pytest.mark.parametrize("tasks, rows, length, tiny", [
    (("describe", "ground", "entail"), {1, 2, 4, 8}, "describe",
     ["describe_s", "ground_s", "entail_s"]),
    (("describe",), {1, 2, 4, 8}, "describe", ["describe_s"]),
    (("ground",), {1, 2, 4}, "ground", ["ground_s"]),  # per-frame batches of batch_size only
    (("entail",), set(), None, ["entail_s"]),          # scoring: no decode step to capture
    (("ground", "entail"), {1, 2, 4}, "ground", ["ground_s", "entail_s"]),
], ids=["all", "describe", "ground", "entail", "ground+entail"])
def test_the_warmup_covers_only_the_served_tasks(engine, tasks, rows, length, tiny):
    """batch_size 4: describe_many still batches up to 8 clips, grounding up to 4 frames."""
    lm = engine.load()
    plan = w.graph_plan(lm, batch_size=4, free_bytes=1 << 50, tasks=tasks)
    describe, ground = _lengths()
    assert ground < describe  # else the cases below could not tell them apart
    assert set(plan) == rows
    assert set(plan.values()) == ({describe if length == "describe" else ground}
                                  if rows else set())
    from dataclasses import replace

    engine4 = type(engine)(replace(engine.model_cfg, batch_size=4), loaded=lm)
    names = [s.name for s in w.warmup_steps(engine4, lm, tasks)]
    assert names == [f"graphs_{r}_s" for r in sorted(rows)] + tiny


def test_a_thinking_model_captures_its_entailment_batch_only_when_entail_is_served(engine):
    from dataclasses import replace

    from chord_core.analysis.entail_batch import MIN_BATCH

    lm = engine.load()
    thinking = replace(lm, info=replace(lm.info, thinking=True))
    plan = w.graph_plan(thinking, batch_size=4, free_bytes=1 << 50, tasks=("entail",))
    assert set(plan) == {batch_bucket(MIN_BATCH)}
    assert batch_bucket(MIN_BATCH) not in w.graph_plan(thinking, batch_size=4,
                                                       free_bytes=1 << 50,
                                                       tasks=("describe", "ground"))


def test_a_served_task_set_warms_up_and_its_requests_capture_nothing(tiny_model_dir, clip_dir):
    """A grounding-only worker: Engine.warmup(tasks=("ground",)) runs the ground steps only,
    and a grounding request after it captures no graph."""
    from chord_core.analysis.engine import Engine
    from chord_core.testing.videos import make_video

    eng = Engine(ModelConfig(model="test", device="cpu", batch_size=4))
    out = eng.warmup(tasks=("ground",))
    assert "ground_s" in out and "describe_s" not in out and "entail_s" not in out
    assert {k for k in out if k.startswith("graphs_") and k.endswith("_s")} == {
        "graphs_1_s", "graphs_2_s", "graphs_4_s"}
    clip = make_video(clip_dir / "ground-only.mp4", duration_s=2.0, fps=4.0,
                      size_wh=(160, 120)).path
    eng.analyze(AnalysisRequest(str(clip), "ground", query="a box"))
    assert eng.load().decoder.stats["captured_on_request"] == 0
