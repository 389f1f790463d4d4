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


# -- the default batch: the memory planner ---------------------------------------------------
GIB = 1 << 30


def test_the_planner_takes_the_largest_batch_the_memory_holds():
    from chord_core.model.planner import DESCRIBE_MEMORY_SHARE, describe_batch_size

    clip, row = GIB // 2, GIB // 4  # a clip's prefill etc., its decode-buffer row
    plenty = int(64 * GIB / DESCRIBE_MEMORY_SHARE)
    assert describe_batch_size(clip, row, plenty) == 32
    assert describe_batch_size(clip, row, plenty, top=24) == 16  # a power of two ≤ top
    # room for 12 clips and their rows (12 × 0.75 GiB): the largest power of two is 8
    assert describe_batch_size(clip, row, int(9 * GIB / DESCRIBE_MEMORY_SHARE)) == 8
    # 16 clips fit only when the decoder already holds its 16-row buffer
    free = int(8.5 * GIB / DESCRIBE_MEMORY_SHARE)
    assert describe_batch_size(clip, row, free) == 8
    assert describe_batch_size(clip, row, free, held_rows=[16]) == 16
    assert describe_batch_size(clip, row, free, held_rows=[32]) == 8  # 32 clips don't fit
    assert describe_batch_size(clip, row, 0) == 1  # never below one clip
    # what a clip needs only while its part is prefilled counts for one part, not the batch
    free = int(64 * GIB / DESCRIBE_MEMORY_SHARE)
    # 32 clips: 16 + 8 GiB, and 8 × 5 GiB for one part of 8 = 64 GiB, which fits
    assert describe_batch_size(clip, row, free, part_bytes=5 * GIB, part=8) == 32
    # 6 GiB a clip while prefilled: 72 GiB at 32; 16 clips need 8 + 4 + 48 = 60 GiB
    assert describe_batch_size(clip, row, free, part_bytes=6 * GIB, part=8) == 16


def test_a_bad_batch_size_is_refused_with_what_to_do(lm):
    from chord_core.analysis.describe_batch import describe_many
    from chord_core.analysis.engine import Engine
    from chord_core.errors import ConfigError

    with pytest.raises(ConfigError, match="batch size must be ≥ 1") as exc:
        describe_many(Engine(loaded=lm), [], batch_size=0)
    assert "leave it unset" in exc.value.hint


@pytest.fixture(scope="module")
def clip_paths(tmp_path_factory) -> list[str]:
    from chord_core.testing.videos import make_text_as_mp4, make_video

    root = tmp_path_factory.mktemp("w1")
    paths = [str(make_video(root / f"c{i}.mp4", duration_s=2.0, fps=10.0, size_wh=(112, 84),
                            seed=i).path) for i in range(7)]
    paths.insert(3, str(make_text_as_mp4(root / "notes.mp4")))  # not a video
    return paths


def _reqs(paths):
    from chord_core.analysis.request import AnalysisRequest
    from chord_core.config import SamplingConfig

    return [AnalysisRequest(p, "describe", sampling=SamplingConfig(fps=2.0), max_new_tokens=6,
                            min_new_tokens=6) for p in paths]


def test_describe_many_batches_as_the_planner_says_in_order(lm, clip_paths, monkeypatch):
    """The default batch is asked of the planner once, with the first clip read; clips go
    through generate in batches of that size, results come back in the requests' order,
    and the file that is not a video fails alone."""
    from chord_core.analysis import describe_batch as db
    from chord_core.analysis.engine import Engine
    from chord_core.model import loading as m

    engine = Engine(loaded=lm)
    assert db.planned_batch(lm, 2000, 128) == db.DESCRIBE_BATCH  # CPU: memory is not the limit
    reqs = _reqs(clip_paths)
    explicit = engine.describe_many(reqs, batch_size=db.DESCRIBE_BATCH)
    asked, sizes, parts = [], [], []
    real_plan, real_parts, real_build = db.planned_batch, db.describe_parts, m.build_video_batch
    monkeypatch.setattr(db, "planned_batch", lambda lm_, vt, new: asked.append((vt, new)) or 3)

    def counted(*a, **k):  # clips per generate call
        outs = real_parts(*a, **k)
        sizes.append(len(outs))
        return outs

    monkeypatch.setattr(db, "describe_parts", counted)
    monkeypatch.setattr(m, "build_video_batch",
                        lambda lm_, clips: parts.append(len(clips)) or real_build(lm_, clips))
    monkeypatch.setattr(db, "PREFILL_PART", 2)
    planned = engine.describe_many(reqs)
    assert len(asked) == 1 and asked[0][1] == 6 and asked[0][0] > 0
    assert sizes == [3, 3, 1]  # 7 good clips in batches of 3
    assert parts == [2, 1, 2, 1, 1]  # each batch prefilled 2 clips at a time
    assert type(planned[3]).__name__ == "VideoError"
    good = [i for i in range(len(reqs)) if i != 3]
    assert [planned[i].video.path for i in good] == [clip_paths[i] for i in good]
    monkeypatch.setattr(db, "planned_batch", real_plan)
    sizes.clear()
    parts.clear()
    default = engine.describe_many(reqs)  # the CPU default: one batch of the 7
    assert sizes == [7] and parts == [2, 2, 2, 1]
    # the same greedy tokens as the explicit batch of the same size, prefilled in parts of
    # 8 there, of 2 here (a changed read-ahead or batch assembly would shift or mix them)
    for a, b in zip(default, explicit):
        assert type(a) is type(b)
        if hasattr(a, "text"):
            assert (a.text, a.tokens, a.video.path) == (b.text, b.tokens, b.video.path)


def test_a_clip_failing_mid_stream_costs_only_itself(lm, clip_paths, monkeypatch):
    """The third part's inputs are refused (after two parts were prefilled): the rest of
    the batch is read, the batch is halved until the clip is found, and every other clip
    still gets its description, in order."""
    from chord_core.analysis import describe_batch as db
    from chord_core.analysis.engine import Engine
    from chord_core.errors import InputError
    from chord_core.model import loading as m

    reqs = _reqs(clip_paths)
    reqs[6] = dataclasses.replace(reqs[6], query="reject me")
    real = m.build_video_batch

    def picky(lm_, clips):
        if any(prompt == "reject me" for _, _, prompt in clips):
            raise InputError("rejected", hint="test")
        return real(lm_, clips)

    monkeypatch.setattr(m, "build_video_batch", picky)
    monkeypatch.setattr(db, "PREFILL_PART", 2)
    out = Engine(loaded=lm).describe_many(reqs)
    kinds = [type(r).__name__ for r in out]
    assert kinds == ["Result"] * 3 + ["VideoError"] + ["Result"] * 2 + ["InputError", "Result"]
    for req, res in zip(reqs, out):
        if kinds[reqs.index(req)] == "Result":
            assert res.video.path == req.video_path and res.tokens["completion"] == 6


def test_requests_with_other_output_lengths_get_their_own_batch(lm, clip_paths):
    from chord_core.analysis.engine import Engine

    good = [p for i, p in enumerate(clip_paths) if i != 3][:5]
    reqs = [dataclasses.replace(r, max_new_tokens=n, min_new_tokens=n)
            for r, n in zip(_reqs(good), (4, 7, 4, 7, 7))]
    out = Engine(loaded=lm).describe_many(reqs)
    assert [r.video.path for r in out] == good
    assert [r.tokens["completion"] for r in out] == [4, 7, 4, 7, 7]


def test_each_clip_hears_once_how_large_its_batch_is(lm, clip_paths, monkeypatch):
    """A streamed batch knows its size once every part is in: each clip gets one
    "generating" event naming it (a worker's jobs show it; the job manager's test reads it)."""
    from chord_core.analysis import describe_batch as db
    from chord_core.analysis.engine import Engine

    monkeypatch.setattr(db, "PREFILL_PART", 2)
    events: list = []
    out = Engine(loaded=lm).describe_many(
        _reqs(clip_paths), batch_size=3,
        on_progress=lambda i, ev: events.append((i, ev.message)) if ev.stage == "generating"
        else None)
    assert type(out[3]).__name__ == "VideoError"
    assert sorted(events) == sorted([(i, "describing in a batch of 3") for i in (0, 1, 2, 4, 5, 6)]
                                    + [(7, "describing in a batch of 1")])
