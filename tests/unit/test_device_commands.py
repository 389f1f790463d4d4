"""The device commands of issue 34 (``benchmarks/run_device.sh`` decode, decode-vss,
decode-user) cannot be run here (no GPU): each one's arguments are checked against the
parser it goes to, so a typo does not cost a 10-minute device call."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "run_device.sh"


def block(name: str) -> str:
    """The body of ``run_device.sh NAME``, continuation lines joined."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    got = re.search(rf'if \[\[ "\$\{{1:-\}}" == {name} \]\]; then\n(.*?)\n  exit 0\nfi',
                    text, re.S)
    assert got, f"no {name} entry in run_device.sh"
    return got.group(1)


def entry(name: str) -> list[list[str]]:
    """The python3 commands of ``run_device.sh NAME``, as shell words (no redirections)."""
    cmds = []
    for line in block(name).splitlines():
        line = re.sub(r"timeout \$\(\(.*?\)\)\)? ", "timeout 1 ", line)  # $((N - (…)))
        words = shlex.split(line.replace("$OUT", "/tmp/out"), comments=True)
        while words and ("=" in words[0] or words[0] == "timeout" or words[0].isdigit()):
            words = words[1:]
        if ">" in words:
            words = words[:words.index(">")]
        if words[:1] == ["python3"]:
            cmds.append(words[1:])
    return cmds


def bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}",
                                                  ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def long_video_args(name: str):
    cmds = [c for c in entry(name) if c[:1] == ["benchmarks/long_video.py"]]
    assert len(cmds) == 1
    return bench("long_video").parser().parse_args(cmds[0][1:])


def test_decode_runs_the_hour_at_the_product_defaults():
    from chord_core.longvideo import settings as lv

    args = long_video_args("decode")
    assert (args.task, args.reader) == ("both", "auto")
    assert (args.ground_max_pixels, args.tokens, args.ground_batch) == (
        lv.GROUND_LONG_MAX_PIXELS, lv.GROUND_LONG_TOKENS, [lv.GROUND_LONG_BATCH])


def test_decode_vss_is_360_chunks_of_20_frames():
    args = long_video_args("decode-vss")
    assert (args.task, args.chunk_s, args.frames_per_chunk, args.describe_fps) == (
        "chapters", 10.0, 20, 2.0)
    assert args.chunk_s * args.describe_fps == args.frames_per_chunk


def test_decode_user_times_the_chapters_command_at_its_defaults():
    from chord_core.__main__ import build_parser

    cmds = [c for c in entry("decode-user") if c[:1] == ["benchmarks/cli_timed.py"]]
    assert len(cmds) == 2  # the defaults; then "then-ab"'s with CHORD_COMPILE=1
    inner = cmds[0][cmds[0].index("--") + 1:]
    assert inner[:3] == ["python3", "-m", "chord_core"]
    args = build_parser().parse_args(inner[3:])
    assert args.command == "chapters"
    given = {a for a in inner if a.startswith("--")}
    assert given == {"--model", "--json"}, "a user's run sets nothing else"


@pytest.mark.parametrize("name", ["decode", "decode-vss", "decode-user"])
def test_each_entry_makes_the_hour_and_the_model_it_runs(name):
    body = block(name)
    assert "decode_prelude" in body and "/tmp/real_hour.mp4" in body
    assert "decode_prelude model" in body or "make-tiny-model /tmp/chord-rand-7b" in body


def test_ground_batch_sweeps_the_hour_at_three_batches_from_the_default():
    from chord_core.longvideo import settings as lv

    args = long_video_args("ground-batch")
    assert (args.task, args.clip, args.warmup) == ("ground", "/tmp/real_hour.mp4", True)
    assert args.ground_batch[0] == lv.GROUND_LONG_BATCH and len(set(args.ground_batch)) == 3
    assert (args.ground_max_pixels, args.tokens) == (lv.GROUND_LONG_MAX_PIXELS,
                                                      lv.GROUND_LONG_TOKENS)


def test_prefill_ab_compares_the_levers_then_runs_the_ofa_loop_twice(monkeypatch):
    """Issues 36/34's prefill call: the in-process A/B on the 7B it builds, then the seed
    client's loop through serve, the default first and both levers second (the service
    reads the settings)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # their bench_common
    cmds = [c for c in entry("prefill-ab") if c[0].startswith("benchmarks/")]
    assert [c[0] for c in cmds] == ["benchmarks/prefill_ab.py", "benchmarks/entail.py",
                                    "benchmarks/entail.py"]
    ab = bench("prefill_ab").parser().parse_args(cmds[0][1:])
    built = re.search(r"M7=(\S+)", block("prefill-ab")).group(1)
    assert (ab.pairs, ab.ground_rows, ab.model) == (32, 128, "$M7")
    loops = [bench("entail").parser().parse_args(c[1:]) for c in cmds[1:]]
    assert [a.parts for a in loops] == ["ofa-loop", "ofa-loop"]
    # the loops' service loads the checkpoint the A/B built (entail.py's default path)
    assert {a.ckpt.format(shape=a.shape, vocab="-vocab") for a in loops} == {built}
    lines = [ln for ln in block("prefill-ab").splitlines() if "benchmarks/entail.py" in ln]
    assert "CHORD_FUSE=0 " in lines[0] and "FP8" not in lines[0]  # neither lever, then both
    assert "CHORD_FP8=1 CHORD_FUSE=1" in lines[1]


def test_levers_long_runs_the_hours_grounding_and_vss_with_the_parsers_arguments():
    parser = bench("long_video").parser()
    runs = []
    for line in block("levers-long").splitlines():
        if "benchmarks/long_video.py" in line:
            words = shlex.split(line.split("benchmarks/long_video.py", 1)[1]
                                .replace("$OUT", "/tmp/out").replace("$tag", ""))
            runs.append(parser.parse_args(words[:words.index(">")]))
    assert [(a.task, a.clip) for a in runs] == [
        ("ground", "/tmp/real_hour.mp4"), ("chapters", "/tmp/real_half_hour.mp4")]
    assert runs[0].ground_batch == [128] and runs[1].frames_per_chunk == 20
    assert 'for levers in "CHORD_FUSE=0" "CHORD_FP8=1 CHORD_FUSE=1"' in block("levers-long")


def test_ofa_gpus_runs_the_loop_on_one_gpu_then_on_all(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # their bench_common
    text = block("ofa-gpus")
    cmds = [c for c in entry("ofa-gpus") if c[:1] == ["benchmarks/entail.py"]]
    assert len(cmds) == 1
    args = bench("entail").parser().parse_args(
        [w.replace("$ALL", "0,1,2,3") for w in cmds[0][1:]])
    assert (args.parts, args.ofa_gpus, args.pairs) == ("ofa-loop", "0;0,1,2,3", 384)
    assert "ALL=$(nvidia-smi --query-gpu=index" in text


def test_h200_36_runs_the_loop_on_photographs_then_on_noise_with_the_prefill_fused(
        monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    text = block("h200-36")
    assert "for kind in photos noise; do" in text and "CHORD_FUSE=1" in text
    cmds = [c for c in entry("h200-36") if c[:1] == ["benchmarks/entail.py"]]
    assert len(cmds) == 1
    for kind, parts in (("photos", "naive,ofa-loop"), ("noise", "ofa-loop")):
        args = bench("entail").parser().parse_args(
            [w.replace("$kind", kind).replace("$parts", parts) for w in cmds[0][1:]])
        assert (args.images, args.parts, args.pairs) == (kind, parts, 384)
        assert args.photo_sources == ".devtmp/photos"
    assert 'bash "$0" tower-ab' in text  # the in-process A/B first


def test_h200_long_grounds_the_hour_at_128_and_256_then_vss_on_the_whole_hour():
    parser = bench("long_video").parser()
    runs = [parser.parse_args(c[1:]) for c in entry("h200-long")
            if c[:1] == ["benchmarks/long_video.py"]]
    assert [(a.task, a.clip) for a in runs] == [
        ("ground", "/tmp/real_hour.mp4"), ("chapters", "/tmp/real_hour.mp4")]
    assert runs[0].ground_batch == [128, 256]
    assert (runs[1].chunk_s, runs[1].frames_per_chunk, runs[1].batch_size) == (10, 20, 16)


def test_photos_are_unique_real_crops(tmp_path, monkeypatch):
    """The photographic images of the entailment benchmarks: as many as asked, each a JPEG
    of 500 × 375 or 375 × 500, no two the same bytes, the same ones for the same seed."""
    from PIL import Image

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    photos = bench("photos")
    src = tmp_path / "src"
    src.mkdir()
    for i, name in enumerate(photos.SOURCES[:3]):  # stand-ins with the sources' names
        Image.effect_mandelbrot((640, 480), (-2 + i * 0.1, -1.2, 1, 1.2), 60).convert(
            "RGB").save(src / name)
    paths = photos.make_photos(tmp_path / "a", 12, src)
    info = photos.describe(paths)
    assert info["images"] == 12 and info["images_unique"]
    sizes = {Image.open(p).size for p in paths}
    assert sizes <= {(500, 375), (375, 500)} and all(Image.open(p).format == "JPEG"
                                                     for p in paths)
    again = photos.make_photos(tmp_path / "b", 12, src)
    assert [Path(p).read_bytes() for p in again] == [Path(p).read_bytes() for p in paths]
    with pytest.raises(SystemExit, match="opencv-doc"):
        photos.make_photos(tmp_path / "c", 2, tmp_path / "empty")


def test_tower_ab_times_the_vision_attention_variants(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    (cmd,) = [c for c in entry("tower-ab") if c[:1] == ["benchmarks/prefill_ab.py"]]
    mod = bench("prefill_ab")
    args = mod.parser().parse_args(cmd[1:])
    assert (args.variants, args.pairs, args.ground_rows) == ("tower", 32, 128)
    assert mod.SETS["tower"][0] == "unfused" and mod.SETS["tower"][3:] == ("now", "untrimmed")


def test_one_call_runs_the_tower_ab_then_grounds_the_hour():
    text = block("one-call")
    assert 'bash "$0" tower-ab' in text and "decode_prelude" in text
    assert not [c for c in entry("one-call") if c[:1] == ["benchmarks/entail.py"]]
    (ground,) = [c for c in entry("one-call") if c[:1] == ["benchmarks/long_video.py"]]
    g = bench("long_video").parser().parse_args(ground[1:])
    assert (g.task, g.ground_batch, g.model) == ("ground", [256, 128], "$M7")


def test_decode_prelude_is_defined_before_any_entry_calls_it():
    """The script runs top to bottom: an entry above the function's definition would stop
    at "decode_prelude: command not found" on the device, after the machine's start."""
    text = SCRIPT.read_text()
    defined = text.index("decode_prelude() {")
    calls = [m.start() for m in re.finditer(r"^\s+decode_prelude\b", text, re.M)]
    assert calls and min(calls) > defined


def test_show_runs_prints_the_summary_then_a_line_a_run(tmp_path):
    """The entries print long_video.py's results through one shell function."""
    import json
    import subprocess

    text = SCRIPT.read_text()
    start = text.index("show_runs() {")
    body = text[start:text.index("\n}\n", start) + 3]
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"wall": 1.5, "runs": [{"a": 1}, {"b": 2}]}))
    out = [subprocess.run(["bash", "-c", body + f'show_runs "{result}" {extra}'],
                          capture_output=True, text=True, check=True).stdout.splitlines()
           for extra in ("", "all")]
    assert [json.loads(x) for x in out[0]] == [{"a": 1}, {"b": 2}]
    assert [json.loads(x) for x in out[1]] == [{"wall": 1.5}, {"a": 1}, {"b": 2}]
    assert "python3 -c \"import json; d=json.load(open('$OUT/long_video" not in text


def test_fuse_kinds_times_the_fused_kinds_apart(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    (cmd,) = [c for c in entry("fuse-kinds") if c[:1] == ["benchmarks/prefill_ab.py"]]
    args = bench("prefill_ab").parser().parse_args(cmd[1:])
    assert (args.variants, args.pairs, args.ground_rows, args.rounds) == ("kinds", 32, 128, 2)
    assert bench("prefill_ab").SETS["kinds"] == ("now", "rope-only", "unfused")
