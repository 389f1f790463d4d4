"""Long-clip grounding's defaults are the benchmark's settings (issue 34: "defaults are the
fast path"): ``ground-long`` and ``ground`` past the long-video threshold read them from
``longvideo/settings.py``, as ``benchmarks/long_video.py`` does; flags still override."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from chord_core.errors import ConfigError
from chord_core.longvideo import settings as lv
from chord_core.longvideo.cli import ground_long_options

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_long_video",
                                                  ROOT / "benchmarks" / "long_video.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cli_args(*argv: str):
    from chord_core.__main__ import build_parser

    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv", [("ground-long", "hour.mp4", "the red car"),
                                  ("ground", "hour.mp4", "the red car")],
                         ids=["ground-long", "ground-past-the-threshold"])
def test_cli_defaults_are_what_the_benchmark_runs(bench, argv):
    b = bench.parser().parse_args([])
    sampling, tokens, batch = ground_long_options(cli_args(*argv))
    assert sampling == bench.ground_sampling(b)
    assert (tokens, [batch]) == (b.tokens, b.ground_batch)
    assert (sampling.ground_max_pixels, tokens, batch) == (112_896, lv.GROUND_LONG_TOKENS, 256)
    assert sampling.min_pixels <= sampling.ground_max_pixels


def test_the_benchmark_grounds_once_per_batch_each_a_run_of_its_own(bench):
    """``--ground-batch 32,64,128`` (the device's batch sweep): each row's chunks hold at
    least its batch, and its target differs from every other row's (the content key has the
    target, not the batch: a row with the first's target would be read from the store)."""
    b = bench.parser().parse_args(["--ground-batch", "32,64,128"])
    assert b.ground_batch == [32, 64, 128]
    base = lv.LongVideoSettings()
    chunks = [bench.ground_settings(base, n).ground_chunk_frames for n in b.ground_batch]
    assert chunks == [256, 256, 256] and base.ground_chunk_frames == lv.GROUND_LONG_BATCH == 256
    assert len(set(bench.GROUND_TARGETS)) == len(bench.GROUND_TARGETS)
    for bad in ("0", "a,b", "1,2,3,4,5,6,7"):
        with pytest.raises(SystemExit):
            bench.parser().parse_args(["--ground-batch", bad])


def test_the_flags_still_override():
    sampling, tokens, batch = ground_long_options(cli_args(
        "ground-long", "hour.mp4", "car", "--ground-max-pixels", "200704",
        "--ground-tokens", "256", "--batch-size", "8"))
    assert (sampling.ground_max_pixels, tokens, batch) == (200_704, 256, 8)
    one_clip, _, _ = ground_long_options(cli_args("ground", "h.mp4", "car", "--max-pixels",
                                                  "50176"))
    assert one_clip.ground_max_pixels == 50_176 and one_clip.min_pixels <= 50_176
    with pytest.raises(ConfigError) as err:
        ground_long_options(cli_args("ground-long", "h.mp4", "car", "--ground-max-pixels", "9"))
    assert err.value.hint


def test_the_default_answer_length_holds_one_whole_box():
    """A box cut off is dropped by the parser; Qwen's tokenizer splits digits one a token, so
    the pre-tokenizer's pieces are a lower bound on the tokens of one fenced box."""
    regex = pytest.importorskip("regex")
    from chord_core.analysis import grounding as g

    qwen2_pieces = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    answer = '```json\n[\n\t{"bbox_2d": [123, 45, 389, 211], "label": "the red car"}\n]\n```'
    pieces = regex.findall(qwen2_pieces, answer)
    assert len(pieces) <= lv.GROUND_LONG_TOKENS
    cut = "".join(pieces[:32])  # the 32 tokens first measured: no box survives
    assert g.parse_boxes(cut, (448, 252)).boxes == []
    assert len(g.parse_boxes(answer, (448, 252)).boxes) == 1


def test_the_app_grounds_a_long_clip_at_the_same_defaults(monkeypatch):
    """The app's long-clip grounding runs what the CLI and the service run (it used the
    one-clip sampling, ≈ 1 MP frames, and 256 answer tokens), and the run it starts is the
    one its page links to (``parent_id``)."""
    from chord_core.longvideo import ground
    from chord_ui import long_runs, long_view
    from chord_ui.uploads import ClipSource

    seen = {}
    monkeypatch.setattr(ground, "ground_long",
                        lambda *a, **kw: seen.update(kw) or "done")  # the job runtime's side
    monkeypatch.setattr(long_view, "settings", lambda: lv.LongVideoSettings())
    run = long_runs.LongRun(key="k", kind="ground")
    work = long_runs.ground_work(None, None, "clipkey", "the red car", lv.LongVideoSettings(),
                                 "test", in_flight=4)
    assert work(run, lambda e: None) == "done"
    assert seen["sampling"] == lv.ground_long_sampling()
    assert (seen["batch_size"], seen["max_new_tokens"]) == (lv.GROUND_LONG_BATCH,
                                                            lv.GROUND_LONG_TOKENS)
    # the id ground_long keys its run with (its sampling and answer tokens in it)
    real = ground.ground_run_id("clipkey", "the red car", lv.LongVideoSettings(), "test",
                                seen["sampling"], seen["max_new_tokens"])
    clip = ClipSource(path="x.mp4", name="x.mp4", key="clipkey", uploaded=False)
    assert run.run_id == real
    assert long_view.parent_id(clip, "ground", "the red car", "test") == real
