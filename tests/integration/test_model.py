"""The real loading and generate path on the tiny random-weight checkpoint (CPU).

Its text is meaningless: these tests assert placement, dtype, the video time axis
(``second_per_grid_ts``), grid sizes, token counts and batching — never the words.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from chord_core.config import ModelConfig
from chord_core.errors import ConfigError, InputError, JobCancelled, ModelError
from chord_core.model import inputs as model_inputs
from chord_core.model import loading as m

SOURCE_FPS = 24.0


@pytest.fixture(scope="module")
def lm(tiny_model_dir: Path) -> m.LoadedModel:
    # the checkpoint the fixture built, whatever CHORD_CACHE_DIR other test folders set since
    return m.load_model(ModelConfig(model="test", device="cpu",
                                    cache_dir=tiny_model_dir.parent.parent))


def _frames(n: int, h: int = 56, w: int = 56, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def _metadata(n: int, sampled_fps: float) -> dict:
    """Frames taken every SOURCE_FPS / sampled_fps source frames from a clip just long
    enough to hold them."""
    step = SOURCE_FPS / sampled_fps
    return {"total_num_frames": int(round(n * step)), "fps": SOURCE_FPS,
            "frames_indices": [int(round(i * step)) for i in range(n)]}


def test_load_reports_placement_and_dtype(lm: m.LoadedModel, tiny_model_dir: Path) -> None:
    assert lm.info.dtype == "float32"
    assert lm.info.device_map == {"": "cpu"}
    assert lm.info.test_model and lm.info.id == "test"
    assert (lm.family, lm.coord_mode, lm.input_device) == ("qwen2.5-vl", "absolute", "cpu")
    assert lm.resolved is not None and lm.resolved.local_path == tiny_model_dir
    assert lm.processor.tokenizer.padding_side == "left"
    assert not lm.model.training and lm.load_s > 0


def _broken_copy(src: Path, dst: Path, name: str, data: bytes) -> Path:
    import shutil

    shutil.copytree(src, dst)
    (dst / name).write_bytes(data)
    return dst


@pytest.mark.parametrize("name, data, match", [
    ("model.safetensors", b"\x00" * 64, "could not load the weights"),
    ("config.json", b"{}", "no usable config.json"),
    ("config.json", b'{"model_type": "llama"}', "unsupported model type"),
], ids=["truncated-weights", "empty-config", "other-architecture"])
def test_broken_checkpoints_are_model_errors(tiny_model_dir: Path, tmp_path: Path, name: str,
                                             data: bytes, match: str) -> None:
    folder = _broken_copy(tiny_model_dir, tmp_path / "broken", name, data)
    with pytest.raises(ModelError, match=match) as info:
        m.load_model(ModelConfig(model=str(folder), device="cpu"))
    assert info.value.hint


@pytest.mark.parametrize("device, match", [("tpu", "unknown device"), ("cpu", None)],
                         ids=["unknown", "explicit-cpu"])
def test_device_choice(tiny_model_dir: Path, device: str, match: str | None) -> None:
    cfg = ModelConfig(model=str(tiny_model_dir), device=device, dtype="bfloat16")
    if match:
        with pytest.raises(ConfigError, match=match):
            m.load_model(cfg)
    else:
        lm = m.load_model(cfg)
        assert lm.info.dtype == "bfloat16" and lm.info.test_model
        assert lm.info.device_map == {"": "cpu"}


def test_cuda_without_gpu_is_a_config_error(tiny_model_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(ConfigError, match="no GPU is visible"):
        m.load_model(ModelConfig(model=str(tiny_model_dir), device="cuda"))


@pytest.mark.parametrize("sampled_fps", [0.5, 1.0, 2.0, 4.0], ids=lambda f: f"{f}fps")
def test_second_per_grid_follows_sampled_fps(lm: m.LoadedModel, sampled_fps: float) -> None:
    """THE time-axis check: without metadata the processor would assume 24 fps."""
    inputs = model_inputs.build_video_inputs(lm, _frames(4), _metadata(4, sampled_fps), "Describe.")
    (seconds,) = inputs["second_per_grid_ts"].tolist()
    assert seconds == pytest.approx(2.0 / sampled_fps)


@pytest.mark.parametrize("n, h, w", [(4, 56, 56), (5, 56, 56), (4, 56, 84), (2, 84, 56)],
                         ids=["4f-square", "5f-odd-padded", "4f-wide", "2f-tall"])
def test_video_grid_matches_input_size_and_frames(lm: m.LoadedModel, n: int, h: int,
                                                  w: int) -> None:
    inputs = model_inputs.build_video_inputs(lm, _frames(n, h, w), _metadata(n, 2.0), "Describe.")
    t, gh, gw = inputs["video_grid_thw"][0].tolist()
    assert (t, gh * 14, gw * 14) == ((n + 1) // 2, h, w)
    video_id = lm.model.config.video_token_id
    assert int((inputs["input_ids"] == video_id).sum()) == t * gh * gw // 4
    assert "mm_token_type_ids" in inputs


@pytest.mark.parametrize("bad_meta, match", [
    ({"total_num_frames": 96, "fps": 24.0}, "lacks frames_indices"),
    ({"total_num_frames": 96, "fps": 24.0, "frames_indices": [0, 24]}, "frame indices"),
    ({"total_num_frames": 96, "fps": 0.0, "frames_indices": [0, 24, 48, 72]}, "implausible"),
    ({"total_num_frames": 2, "fps": 24.0, "frames_indices": [0, 24, 48, 72]}, "implausible"),
], ids=["no-indices", "count-mismatch", "zero-fps", "fewer-source-frames"])
def test_video_metadata_is_required(lm: m.LoadedModel, bad_meta: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        model_inputs.build_video_inputs(lm, _frames(4), bad_meta, "Describe.")


@pytest.mark.parametrize("frames, match", [
    (np.zeros((4, 56, 56, 3), dtype=np.float32), "uint8"),
    (np.zeros((56, 56, 3), dtype=np.uint8), "4 dims"),
    (np.zeros((4, 14, 56, 3), dtype=np.uint8), "smaller than 28"),
    (np.zeros((0, 56, 56, 3), dtype=np.uint8), "no video frames"),
], ids=["float", "single-image", "too-small", "empty"])
def test_bad_frames_are_input_errors(lm: m.LoadedModel, frames: np.ndarray, match: str) -> None:
    with pytest.raises(InputError, match=match):
        model_inputs.build_video_inputs(lm, frames, _metadata(4, 2.0), "Describe.")


def test_describe_generates_exactly_max_tokens_when_eos_is_suppressed(lm: m.LoadedModel) -> None:
    out = m.describe(lm, _frames(4), _metadata(4, 2.0), "Describe.", 12, min_new_tokens=12)
    assert isinstance(out, m.GenerationOutput) and isinstance(out.text, str)
    assert out.new_tokens == 12
    assert out.prompt_tokens > 4 and out.preprocess_s > 0 and out.generate_s > 0


def test_describe_never_exceeds_max_tokens(lm: m.LoadedModel) -> None:
    out = m.describe(lm, _frames(4, seed=3), _metadata(4, 1.0), "What happens?", 6)
    assert 1 <= out.new_tokens <= 6


def test_describe_is_deterministic(lm: m.LoadedModel) -> None:
    args = (lm, _frames(4, seed=5), _metadata(4, 2.0), "Describe.", 8)
    assert m.describe(*args).text == m.describe(*args).text


def test_cancelled_describe_raises(lm: m.LoadedModel) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(JobCancelled):
        m.describe(lm, _frames(4), _metadata(4, 2.0), "Describe.", 8, cancel=cancel)


def _images() -> list[np.ndarray]:
    """Five images, two sizes: batches then need left padding."""
    sizes = [(56, 84), (84, 84), (56, 56), (84, 56), (56, 84)]
    return [_frames(1, h, w, seed=i)[0] for i, (h, w) in enumerate(sizes)]


def test_ground_images_batches_and_reports_input_size(lm: m.LoadedModel) -> None:
    images = _images()
    progress: list[tuple[int, int]] = []
    outs = m.ground_images(lm, images, "red car", batch_size=2, max_new_tokens=6,
                           on_batch=lambda done, total: progress.append((done, total)))
    assert len(outs) == 5 and all(isinstance(o, m.GroundOutput) for o in outs)
    assert [o.input_wh for o in outs] == [(img.shape[1], img.shape[0]) for img in images]
    assert progress == [(2, 5), (4, 5), (5, 5)]
    assert all(1 <= o.new_tokens <= 6 and o.prompt_tokens > 0 for o in outs)


def test_batched_and_unbatched_greedy_outputs_agree(lm: m.LoadedModel) -> None:
    images = _images()
    batched = m.ground_images(lm, images, "person", batch_size=4, max_new_tokens=8)
    single = m.ground_images(lm, images, "person", batch_size=1, max_new_tokens=8)
    assert [o.text for o in batched] == [o.text for o in single]
    assert [o.new_tokens for o in batched] == [o.new_tokens for o in single]


def test_ground_images_cancel_stops_before_next_batch(lm: m.LoadedModel) -> None:
    cancel = threading.Event()
    done: list[int] = []

    def on_batch(n: int, total: int) -> None:
        done.append(n)
        cancel.set()

    with pytest.raises(JobCancelled):
        m.ground_images(lm, _images(), "car", batch_size=2, max_new_tokens=2,
                        on_batch=on_batch, cancel=cancel)
    assert done == [2]
