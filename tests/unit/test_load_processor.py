"""The processor is loaded on a thread while the weights load (``loading._load_processor``):
the load's split says what it took on its thread and what the load still waited for, and the
processor it hands back prepares inputs exactly as one loaded on its own — also when the
model loads in bfloat16, during which transformers switches torch's default dtype for the
whole process (a tensor made on the thread then would be made in bfloat16)."""

from __future__ import annotations

import numpy as np
import pytest

from chord_core.config import ModelConfig
from chord_core.model import loading as m
from chord_core.model.inputs import build_image_inputs, build_video_batch


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_processor_loaded_beside_the_weights_prepares_the_same_inputs(tiny_model_dir,
                                                                          dtype):
    import torch
    from transformers import AutoProcessor

    lm = m.load_model(ModelConfig(model="test", device="cpu", dtype=dtype))
    assert lm.info.dtype == dtype
    assert {"weights_s", "processor_thread_s", "processor_s"} <= set(lm.phases)
    assert lm.processor.tokenizer.padding_side == "left"
    assert torch.get_default_dtype() == torch.float32  # restored after the load

    alone = AutoProcessor.from_pretrained(str(tiny_model_dir))
    alone.tokenizer.padding_side = "left"
    plain = m.LoadedModel(model=None, processor=alone, info=lm.info, family=lm.family,
                          coord_mode=lm.coord_mode, load_s=0.0, input_device="cpu")
    frames = np.random.default_rng(0).integers(0, 255, (2, 56, 84, 3), dtype=np.uint8)
    meta = {"total_num_frames": 2, "fps": 2.0, "frames_indices": [0, 1], "duration": 1.0}
    for build in (lambda x: build_video_batch(x, [(frames, meta, "what happens?")]),
                  lambda x: build_image_inputs(x, [frames[0], frames[1]], "a box")):
        got, want = build(lm), build(plain)
        assert set(got) == set(want)
        for key in want:
            assert got[key].dtype == want[key].dtype, key
            assert torch.equal(got[key], want[key]), key


def test_a_processor_that_cannot_load_fails_the_load_with_what_to_do(tiny_model_dir,
                                                                     tmp_path):
    """The thread's error is the load's, as a ModelError naming the processor and the fix."""
    import shutil

    from chord_core.errors import ModelError

    broken = tmp_path / "bad-processor"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "preprocessor_config.json").write_text("{ truncated")
    with pytest.raises(ModelError, match="could not load the processor") as exc:
        m.load_model(ModelConfig(model=str(broken), device="cpu"))
    assert "download the model again" in exc.value.hint
