"""Issue 36 (W1 throughput) on the CPU with the tiny test model: the video processor runs
where the model's inputs go (on a GPU host: the GPU, not the host cores), and
``describe_many``'s default batch comes from the memory planner — with the same results,
in order, one clip's error costing only that clip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from chord_core.config import ModelConfig
from chord_core.model.inputs import build_video_batch

META = {"total_num_frames": 40, "fps": 10.0, "frames_indices": [0, 10, 20, 30]}


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from chord_core.model.loading import load_model

    return load_model(ModelConfig(model="test", device="cpu"))


def test_video_pixels_are_made_on_the_models_device(lm):
    """A model whose inputs go to another device gets its pixels converted there ("meta"
    stands in for a GPU: the processor's arithmetic really runs on it), the token ids and
    grids unchanged; a CPU model keeps the processor's default."""
    frames = np.random.default_rng(0).integers(0, 255, (4, 56, 84, 3), dtype=np.uint8)
    clips = [(frames, META, "hi"),
             (frames[:2], {**META, "frames_indices": [0, 10]}, "a longer prompt here")]
    host = build_video_batch(lm, clips)
    there = build_video_batch(dataclasses.replace(lm, input_device="meta"), clips)
    assert host["pixel_values_videos"].device.type == "cpu"
    assert there["pixel_values_videos"].device.type == "meta"
    assert there["pixel_values_videos"].shape == host["pixel_values_videos"].shape
    for key in ("input_ids", "attention_mask", "video_grid_thw"):
        assert there[key].device.type == "cpu" and bool((there[key] == host[key]).all()), key
