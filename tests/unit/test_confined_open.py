"""Opening what was checked (``media.confined``): a request's media roots travel with it, and
every reader opens its file under them at open time. A symlink, a moved folder, a FIFO or a
device swapped in after the submit-time check is refused with one message; the outside file's
size and frames never come back. Unconfined paths (the CLI) open as before."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from chord_core.analysis.request import AnalysisRequest, probe_input
from chord_core.errors import InputError
from chord_core.media import confined
from chord_core.testing.videos import make_video


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An inside clip (64×48, 10 frames) and an outside one (160×120, 20 frames)."""
    base = tmp_path_factory.mktemp("confined")
    return {"inside": make_video(base / "inside.mp4", duration_s=1.0, size_wh=(64, 48)).path,
            "outside": make_video(base / "outside.mp4", duration_s=2.0,
                                  size_wh=(160, 120)).path}


@pytest.fixture
def root(tmp_path: Path, clips: dict[str, Path]) -> Path:
    media = tmp_path / "media"
    (media / "sub").mkdir(parents=True)
    (media / "sub" / "swap.mp4").write_bytes(clips["inside"].read_bytes())
    return Path(os.path.realpath(media))


def _confined(root: Path, path: Path) -> AnalysisRequest:
    return AnalysisRequest(str(path), "describe", media_roots=(str(root),))


def test_a_confined_file_that_stayed_put_is_read(root: Path) -> None:
    target = root / "sub" / "swap.mp4"
    _confined(root, target)
    info = probe_input(target)
    assert (info.width, info.height, info.frame_count) == (64, 48, 10)
    assert info.path == str(target)  # messages and results keep the real name


def _swap_file_for_link(root: Path, outside: Path) -> None:
    target = root / "sub" / "swap.mp4"
    target.unlink()
    os.symlink(outside, target)


def _swap_folder_for_link(root: Path, outside: Path) -> None:
    os.rename(root / "sub", root / "old")
    (outside.parent / "evil").mkdir(exist_ok=True)
    link = outside.parent / "evil" / "swap.mp4"
    if not link.exists():
        os.symlink(outside, link)
    os.symlink(outside.parent / "evil", root / "sub")


def _swap_for_fifo(root: Path, outside: Path) -> None:
    (root / "sub" / "swap.mp4").unlink()
    os.mkfifo(root / "sub" / "swap.mp4")


def _swap_for_device(root: Path, outside: Path) -> None:
    (root / "sub" / "swap.mp4").unlink()
    os.symlink("/dev/zero", root / "sub" / "swap.mp4")


def _remove(root: Path, outside: Path) -> None:
    (root / "sub" / "swap.mp4").unlink()


@pytest.mark.parametrize("swap", [_swap_file_for_link, _swap_folder_for_link, _swap_for_fifo,
                                  _swap_for_device, _remove],
                         ids=["file-to-link", "folder-to-link", "fifo", "device", "removed"])
def test_a_swap_after_the_check_is_refused_with_one_message(root, clips, swap) -> None:
    target = root / "sub" / "swap.mp4"
    request = _confined(root, target)
    swap(root, clips["outside"])
    with pytest.raises(InputError) as err:
        probe_input(request.video_path)
    # the outside clip's facts (160×120) must not leak; the temp paths themselves may hold
    # any digits (pytest-of-root/pytest-160/…), so they are taken out before the check
    text = str(err.value.to_dict()).replace(str(target), "").replace(str(root), "")
    assert err.value.message == f"{target} is not a file under the media roots ({root})"
    assert "160" not in text and "120" not in text and "outside" not in text


def test_the_roots_travel_through_pickle_and_the_store(root, clips) -> None:
    """A worker process gets the request by pickle, a resumed job by ``from_dict``: both
    confine the path there before any reader sees it."""
    target = root / "sub" / "swap.mp4"
    request = _confined(root, target)
    with confined._LOCK:
        confined._CONFINED.pop(confined._key(target))  # as in a fresh worker process
    assert confined.roots_for(target) is None
    copy = pickle.loads(pickle.dumps(request))
    assert copy == request and confined.roots_for(target) == (str(root),)
    with confined._LOCK:
        confined._CONFINED.pop(confined._key(target))
    assert AnalysisRequest.from_dict(request.to_dict()).media_roots == (str(root),)
    assert confined.roots_for(target) == (str(root),)


def test_every_reader_is_refused_after_a_swap(root, clips) -> None:
    from chord_core.media.av_reader import read_frames_av
    from chord_core.media.content_keys import file_hash
    from chord_core.media.frame_times import read_frame_times
    from chord_core.media.video import iter_frames

    target = root / "sub" / "swap.mp4"
    _confined(root, target)
    _swap_file_for_link(root, clips["outside"])
    readers = [lambda: next(iter_frames(target)), lambda: read_frame_times(target),
               lambda: file_hash(target), lambda: read_frames_av(target, (0,))]
    for read in readers:
        with pytest.raises(InputError, match="is not a file under the media roots"):
            read()


def test_unconfined_paths_open_as_before(clips) -> None:
    """The CLI reads any file its user can: no request named roots for it."""
    info = probe_input(clips["outside"])
    assert (info.width, info.height, info.frame_count) == (160, 120, 20)
    with confined.source(clips["outside"]) as name:
        assert name == str(clips["outside"])


def test_a_descriptor_name_is_bound_to_the_checked_file(root, clips) -> None:
    """Once opened, renaming a link into place changes nothing: the reader gets the inode
    that was checked."""
    target = root / "sub" / "swap.mp4"
    _confined(root, target)
    with confined.source(target) as name:
        assert name.startswith("/proc/self/fd/")
        os.replace(target, root / "sub" / "moved.mp4")
        os.symlink(clips["outside"], target)
        with open(name, "rb") as fh:
            assert fh.read() == (root / "sub" / "moved.mp4").read_bytes()
