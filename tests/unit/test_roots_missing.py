"""A missing file inside a media root says "no such file in <root>" with close names; outside
the roots the one refusal stays, whether the file exists or not (no existence oracle)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chord_core.errors import InputError
from chord_core.media import roots as media_roots


@pytest.fixture()
def tree(tmp_path: Path) -> dict[str, Path]:
    root, outside = tmp_path / "media", tmp_path / "outside"
    (root / "day1").mkdir(parents=True)
    outside.mkdir()
    for name in ("street-01.mp4", "street-02.mp4", "harbour.avi", "notes.txt"):
        (root / "day1" / name).write_bytes(b"x")
    (outside / "secret.mp4").write_bytes(b"x")
    (root / "out-link").symlink_to(outside)
    return {"root": root, "outside": outside}


def _message(typed: str, root: Path) -> tuple[str, str]:
    with pytest.raises(InputError) as err:
        media_roots.resolve_video(typed, env={media_roots.ENV: str(root)})
    return err.value.message, err.value.hint


@pytest.mark.parametrize(("typed", "message", "hint"), [
    ("day1/street-1.mp4", "no such file in {root}: day1/street-1.mp4",
     "did you mean street-01.mp4 or street-02.mp4? (in {root}/day1)"),
    ("day1/harbor.avi", "no such file in {root}: day1/harbor.avi",
     "did you mean harbour.avi? (in {root}/day1)"),
    ("day1/zzzz.mp4", "no such file in {root}: day1/zzzz.mp4",
     "check the file name; no video in {root}/day1 has a name close to it"),
    ("day2/street-01.mp4", "no such file in {root}: day2/street-01.mp4 (its folder does not "
     "exist)", "check the folder names in the path, or upload the clip"),
], ids=["two-close", "one-close", "none-close", "no-folder"])
def test_missing_inside_a_root(tree: dict[str, Path], typed: str, message: str,
                               hint: str) -> None:
    root = tree["root"]
    got = _message(str(root / typed), root)
    assert got == (message.format(root=root), hint.format(root=root))


@pytest.mark.parametrize("typed", [
    "{outside}/secret.mp4", "{outside}/missing.mp4", "{root}/out-link/secret.mp4",
    "{root}/out-link/missing.mp4", "{root}/../outside/missing.mp4", "/etc/nope.mp4",
    "{root}/day1/notes.txt", "{root}/day1/missing.txt",
], ids=["exists-out", "missing-out", "link-out", "link-out-missing", "dotdot", "etc",
        "not-video", "missing-not-video"])
def test_outside_the_roots_one_message(tree: dict[str, Path], typed: str) -> None:
    root = tree["root"]
    typed = typed.format(root=root, outside=tree["outside"])
    message, _ = _message(typed, root)
    assert message == f"{typed} is not a video file under the media roots ({root})"


def test_close_names_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in range(30):
        (tmp_path / f"clip{k:02d}.mp4").write_bytes(b"x")
    monkeypatch.setattr(media_roots, "MAX_CLOSE_SCAN", 5)
    names = media_roots.close_names(tmp_path / "clip0.mp4")
    assert 1 <= len(names) <= media_roots.MAX_CLOSE_NAMES
    assert all(n.startswith("clip") for n in names)


def test_said_in_chinese() -> None:
    from chord_ui.messages import localized

    msg, hint = localized("no such file in /m: a/b.mp4",
                          "did you mean b1.mp4 or b2.mp4? (in /m/a)", "zh")
    assert (msg, hint) == ("/m 中没有这个文件：a/b.mp4", "您是不是要找 b1.mp4 或 b2.mp4？（在 /m/a 中）")

