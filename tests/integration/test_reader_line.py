"""The CLI says on stderr which frame reader ran (issue 34): one ``reader: …`` line for
``chapters``, ``search``, ``ground-long``, ``describe`` and ``ground``, none with ``-q``. Real
commands in this process on the tiny random-weight model and a real 13 s clip."""

from __future__ import annotations

import json
import re

import pytest

from chord_core.media.readers import reader_line
from chord_core.testing.scenes import even_times, make_scene_clip

pytest.importorskip("av")
LINE = re.compile(r"^reader: (nvdec|cpu-pool|default)( \(.+\))?$")
LONG = ["--in-process", "--model", "test", "--long-after", "0", "--chunk-s", "5",
        "--frames-per-chunk", "4", "--max-new-tokens", "128", "--cuts", "fixed"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_scene_clip(tmp_path_factory.mktemp("rl") / "c.mp4", [37, 90],
                           even_times(130, 10.0)).path


def run(capsys, argv):
    from chord_core.__main__ import main

    assert main([str(a) for a in argv]) == 0
    got = capsys.readouterr()
    return got.out, [ln for ln in got.err.splitlines() if ln.startswith("reader:")]


def nvdec_missing() -> bool:
    try:
        import PyNvVideoCodec  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.mark.parametrize("argv", [
    ["describe", "{clip}", "--model", "test", "--max-new-tokens", "128", "--no-store",
     "--max-frames", "4"],
    ["ground", "{clip}", "the square", "--model", "test", "--max-frames", "4", "--no-store"],
], ids=["describe", "ground"])
def test_one_clip_commands_name_the_reader_of_their_result(tiny_model_dir, clip, capsys, argv):
    out, lines = run(capsys, [clip if a == "{clip}" else a for a in argv])
    sampling = json.loads(out)["sampling"]
    assert lines == [reader_line([(sampling["reader"], sampling["reader_note"])])]
    assert LINE.match(lines[0]) and sampling["reader"] in lines[0]
    if nvdec_missing():
        assert "nvdec not used: PyNvVideoCodec is not installed" in lines[0]


def test_long_video_commands_say_one_reader_line(tiny_model_dir, clip, capsys, tmp_path,
                                                 monkeypatch):
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))  # a store of this test's own
    _, lines = run(capsys, ["chapters", clip, *LONG])
    assert len(lines) == 1 and LINE.match(lines[0]), lines
    _, lines = run(capsys, ["search", clip, "a square", "--max-frames", "4", *LONG])
    assert len(lines) == 1 and LINE.match(lines[0]), lines
    out, lines = run(capsys, ["ground-long", clip, "the square", *LONG])
    sampling = json.loads(out)["sampling"]
    assert lines == [reader_line([(sampling["reader"], sampling["reader_note"])])]
    assert sampling["input_wh"][0] * sampling["input_wh"][1] <= 112_896
    _, lines = run(capsys, ["chapters", clip, *LONG])  # read back from the store
    assert lines == ["reader: none (nothing was decoded: the result was read back from the "
                     "store)"]
    _, lines = run(capsys, ["chapters", clip, *LONG, "-q"])
    assert lines == []
    _, lines = run(capsys, ["describe", clip, "--model", "test", "--max-new-tokens", "128",
                            "--no-store", "--max-frames", "4", "-q"])
    assert lines == []
