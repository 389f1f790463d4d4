"""``benchmarks/pass_flops.py``: the products of a pass, counted as it runs, against the
arithmetic of the test model's shapes; and ``prefill_ab.py`` reporting them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from chord_core.analysis.engine import Engine
    from chord_core.config import ModelConfig

    return Engine(ModelConfig(model=str(tiny_model_dir), device="cpu", compile=False)).load()


def test_the_language_models_products_match_its_shapes(lm, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import pass_flops

    from chord_core.analysis import entailment as ent
    from chord_core.model import last_mlp
    from chord_core.model.fastvision import vision_tower

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (112, 140, 3), dtype=np.uint8) for _ in range(3)]
    inputs = ent._inputs(lm, images, ["a cat", "two dogs on a mat", "x"])
    with last_mlp.disabled(lm.model):  # every position through every product
        flop = pass_flops.count(lm.model, lambda: ent._prefill(lm, inputs))
    trimmed = pass_flops.count(lm.model, lambda: ent._prefill(lm, inputs))

    text = lm.model.config.get_text_config()
    h, inter, heads = text.hidden_size, text.intermediate_size, text.num_attention_heads
    hd = getattr(text, "head_dim", None) or h // heads
    kv = text.num_key_value_heads * hd
    rows, length = inputs["input_ids"].shape  # the padded batch, as the products see it
    per_token = h * (heads * hd) + 2 * h * kv + heads * hd * h + 3 * h * inter
    head = rows * h * text.vocab_size  # logits at the one position kept
    assert flop["language"] == 2 * (rows * length * per_token * text.num_hidden_layers + head)
    # the last MLP at the kept position only: (length - 1) positions a row fewer
    assert flop["language"] - trimmed["language"] == 2 * rows * (length - 1) * 3 * h * inter

    tower = vision_tower(lm.model)
    alone = pass_flops.count(lm.model, lambda: tower(inputs["pixel_values"],
                                                     inputs["image_grid_thw"]))
    assert alone["language"] == 0 and alone["tower"] == flop["tower"] > 0
    assert flop["total"] == flop["tower"] + flop["language"]
    # the patch embedding is counted once, from its weight: patches × 2 × weight size
    patches = int(inputs["image_grid_thw"].prod(-1).sum())
    embed = 2 * patches * tower.patch_embed.proj.weight.numel()
    assert flop["tower"] > embed
    assert pass_flops.achieved(2e12, {"a": 0.5, "b": 0.0}) == {"a": 4.0}


@pytest.mark.slow
def test_prefill_ab_reports_the_tower_alone_and_tflops(tmp_path, tiny_model_dir):
    out = tmp_path / "ab.json"
    proc = subprocess.run([sys.executable, "benchmarks/prefill_ab.py", "--model", "test",
                           "--device", "cpu", "--pairs", "3", "--ground-rows", "2",
                           "--variants", "tower", "--no-gemm", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    variants = res["variants"]
    for row in ("entail", "entail_tower", "ground"):
        assert set(res[row]["tflops"]) == set(variants)
        assert res[row]["gflop"]["total"] > 0
    assert res["entail_tower"]["gflop"]["language"] == 0
    assert all(0 < s < 1.5 for s in res["entail_tower"]["tower_share"].values())


def test_each_prefill_ab_variant_turns_on_what_its_name_says(lm, monkeypatch):
    """"unfused" is nothing fused (it once matched "fused" as a substring and ran fused)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import prefill_ab

    from chord_core.config import ModelConfig
    from chord_core.model import fastvision, fused, last_mlp
    from chord_core.model import loading as m

    fast = m.load_model(ModelConfig(model="test", device="cpu", fuse=True))
    assert set(prefill_ab.VARIANTS) >= {v for vs in prefill_ab.SETS.values() for v in vs}

    def state():
        kinds = {k for mod, k in fused.targets(fast.model)
                 if (isinstance(mod._chord_rope, fused._Rope) if k == "rope"
                     else mod.__dict__["forward"] is not mod.__dict__["_chord_unfused"])}
        trim = fast.model.__dict__["_chord_last_mlp"]["on"]
        return kinds, fastvision.VARLEN, trim

    with prefill_ab._variant(fast.model, "unfused"):
        assert state() == (set(), False, False)
    with prefill_ab._variant(fast.model, "s11"):
        assert state() == ({"norm", "mlp"}, False, False)
    with prefill_ab._variant(fast.model, "rope-only"):
        assert state() == ({"rope"}, True, True)
    with prefill_ab._variant(fast.model, "now"):
        assert state() == ({"norm", "mlp", "rope"}, True, True)
    assert last_mlp.installed(fast.model)
