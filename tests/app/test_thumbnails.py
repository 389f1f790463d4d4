"""History's thumbnails: a frame of a clip under the media roots as a small JPEG data URI,
cached on disk; nothing for a file outside the roots, a gone one or an unreadable one."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest


@pytest.fixture()
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "media"
    root.mkdir()
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(root))
    return root


def test_a_clip_under_the_roots_gets_a_cached_thumbnail(roots: Path, tmp_path: Path) -> None:
    from PIL import Image

    from chord_core.testing.videos import make_video
    from chord_ui.thumbnails import THUMB_W, thumbnail_uri, thumbs_dir

    clip = roots / "street.mp4"
    make_video(clip, duration_s=1.0, fps=10.0, size_wh=(320, 240))
    uri = thumbnail_uri(str(clip), tmp_path / "data")
    assert uri is not None and uri.startswith("data:image/jpeg;base64,")
    img = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert img.size == (THUMB_W, 72)  # the clip's aspect kept
    (cached,) = thumbs_dir(tmp_path / "data").glob("*.jpg")
    assert thumbnail_uri(str(clip), tmp_path / "data") == uri  # read back, not made again
    assert len(list(thumbs_dir(tmp_path / "data").glob("*.jpg"))) == 1 and cached.exists()


@pytest.mark.parametrize("case", ["outside", "gone", "text-as-mp4", "empty"])
def test_no_thumbnail_without_a_readable_clip(roots: Path, tmp_path: Path, case: str) -> None:
    from chord_core.testing.videos import make_text_as_mp4, make_video
    from chord_ui.thumbnails import thumbnail_uri, thumbs_dir

    data = tmp_path / "data"
    if case == "outside":
        path = tmp_path / "private.mp4"
        make_video(path, duration_s=1.0, fps=10.0, size_wh=(160, 120))
    elif case == "gone":
        path = roots / "gone.mp4"
    elif case == "text-as-mp4":
        path = make_text_as_mp4(roots / "notes.mp4")
    else:
        path = Path("")
    assert thumbnail_uri(str(path) if case != "empty" else "", data) is None
    if case == "text-as-mp4":  # remembered: the next rerun does not decode it again
        assert len(list(thumbs_dir(data).glob("*.none"))) == 1
    else:
        assert not thumbs_dir(data).exists()  # nothing outside the roots was opened


def test_a_clip_swapped_for_a_link_to_an_outside_file_gets_no_thumbnail(
        roots: Path, tmp_path: Path) -> None:
    """Under the roots by name, a symlink to a file elsewhere by content: refused where it
    is opened (resolve_video then open by the resolved name was a race; now one open)."""
    from chord_core.testing.videos import make_video
    from chord_ui.thumbnails import thumbnail_uri, thumbs_dir

    (tmp_path / "private").mkdir()
    secret = make_video(tmp_path / "private" / "secret.mp4", duration_s=1.0, fps=10.0,
                        size_wh=(160, 120)).path
    link = roots / "clip.mp4"
    link.symlink_to(secret)
    assert thumbnail_uri(str(link), tmp_path / "data") is None
    assert not thumbs_dir(tmp_path / "data").exists()  # nothing was decoded
