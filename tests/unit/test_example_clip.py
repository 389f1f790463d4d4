"""``python -m chord_core example-clip PATH``: the README's inputs, made on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from chord_core.__main__ import main
from chord_core.media.probe import probe
from chord_core.testing.example_clip import FPS, SECONDS, SIZE_WH


def test_writes_the_clip_and_stills(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    paths = [tmp_path / "media" / "clip.mp4", tmp_path / "ball.jpg", tmp_path / "s.png"]
    assert main(["example-clip", *map(str, paths)]) == 0
    assert capsys.readouterr().out.split() == [str(p) for p in paths]
    info = probe(str(paths[0]))
    assert (info.width, info.height, info.frame_count) == (*SIZE_WH, int(SECONDS * FPS))
    for still in paths[1:]:
        with Image.open(still) as img:
            assert img.size == SIZE_WH and img.format == ("PNG" if still.suffix == ".png"
                                                          else "JPEG")
    assert not list(tmp_path.rglob(".*.part*"))  # written whole: no temporary left


def test_an_unknown_suffix_is_refused_with_a_hint(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    assert main(["example-clip", str(tmp_path / "clip.txt")]) == 2
    err = capsys.readouterr().err
    assert "cannot tell what to write" in err and "hint: end the path in .mp4" in err
    assert not (tmp_path / "clip.txt").exists()
