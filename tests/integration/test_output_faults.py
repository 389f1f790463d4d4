"""Outputs that cannot be written: refused before any work (exit 2), or — when the disk fills
up during the work — the finished result is kept in the job store and the error says where.

Tests run as root in CI, where permissions do not stop writes: unwritable places are a path
under a *file*, a folder given as the file, and /proc. The full disk is faked at the OS
boundary: ``os.write`` raises ENOSPC for files in one folder (everything else writes)."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest

from chord_core.__main__ import main
from chord_core.testing.videos import make_video

pytestmark = pytest.mark.slow


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    return make_video(tmp_path / "clip.mp4", duration_s=1.0, fps=8.0, size_wh=(64, 48)).path


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def full_disk(monkeypatch):
    """``full_disk(folder)``: from now on, writes to files under ``folder`` fail with ENOSPC;
    ``full_disk(None)`` frees the space again."""
    real_write = os.write

    def arm(folder: Path | None) -> None:
        if folder is None:
            monkeypatch.setattr(os, "write", real_write)
            return
        prefix = str(folder.resolve()) + os.sep

        def write(fd: int, data) -> int:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.startswith(prefix):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
    return arm


def _unwritable(tmp_path: Path, kind: str) -> tuple[str, str]:
    """(option, path) that cannot be written, as root too."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return {
        "json-under-a-file": ("--json", str(blocker / "out.json")),
        "json-is-a-folder": ("--json", str(tmp_path)),
        "json-in-proc": ("--json", "/proc/chord-no-such/out.json"),
        "video-under-a-file": ("--annotated-video", str(blocker / "sub" / "out.mp4")),
    }[kind]


@pytest.mark.parametrize("kind", ["json-under-a-file", "json-is-a-folder", "json-in-proc",
                                  "video-under-a-file"])
def test_unwritable_output_is_refused_before_any_work(tmp_path, clip, kind, capsys):
    option, target = _unwritable(tmp_path, kind)
    # a missing model: had the analysis started first, the error would be about the model
    rc = main(["ground", str(clip), "the square", "--model", str(tmp_path / "no-model"),
               option, target, "-q"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, lines
    what = "the annotated video" if option == "--annotated-video" else "the JSON output"
    assert lines[0].startswith(f"error: {what} {target} is a folder" if kind.endswith("folder")
                               else f"error: cannot write {what} in "), lines
    assert lines[1].startswith("hint: ") and len(lines) == 2, lines


def test_full_disk_keeps_the_result_in_the_store(tmp_path, clip, data_dir, full_disk, capsys,
                                                 tiny_model_dir):
    out = tmp_path / "full"
    out.mkdir()
    target = out / "result.json"
    full_disk(out)
    rc = main(["describe", str(clip), "--model", "test", "--max-new-tokens", "128",
               "--json", str(target), "-q"])
    err = capsys.readouterr().err
    assert rc == 2, err
    error = next(line for line in err.splitlines() if line.startswith("error: "))
    assert f"could not write {target}: No space left on device" in error
    # the run was kept as its job before the write (a CLI run is stored): that job is named
    assert f"kept in the job store {data_dir / 'chord.sqlite3'} as job job-" in error
    job_id = re.search(r"job-[0-9a-f]{12}", error).group(0)
    assert f"python -m chord_core export {job_id} --json {target}" in err
    assert list(out.iterdir()) == []  # no half-written file, no temporary left behind
    full_disk(None)  # space freed: the stored result comes out whole
    assert main(["export", job_id, "--json", str(target)]) == 0
    doc = json.loads(target.read_text())
    assert doc["schema"] == "chord.result/v1" and doc["video"]["path"] == str(clip)
    assert doc["task"] == "describe"


def test_batch_on_a_full_disk_keeps_every_result(tmp_path, data_dir, full_disk, capsys,
                                                 tiny_model_dir):
    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(2):
        make_video(clips / f"c{i}.mp4", duration_s=1.0, fps=8.0, size_wh=(64, 48), seed=i)
    out = tmp_path / "out"
    out.mkdir()
    full_disk(out)
    rc = main(["batch", str(clips), "--task", "describe", "--max-new-tokens", "128",
               "--cpu-workers", "2", "--model", "test", "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert (f"error: 2 result file(s) could not be written to {out} (No space left on device)"
            in err), err
    assert "run the same command again" in err and "Traceback" not in err
    assert list(out.iterdir()) == []
    from chord_core.runtime.store import Store

    with Store() as store:
        # the clips' jobs: children of the batch's own (parent) row
        done = [j for j in store.list_jobs(state="done") if j.get("parent")]
        assert sorted(Path(j["video_path"]).name for j in done) == ["c0.mp4", "c1.mp4"]
        assert all(store.get_result(j["job_id"])["schema"] == "chord.result/v1" for j in done)


def test_full_disk_while_rendering_costs_only_the_video(tmp_path, clip, data_dir, capsys,
                                                        tiny_model_dir, monkeypatch):
    """The annotated MP4 is made after the result JSON is saved; the encoder's output file
    failing with ENOSPC (faked where PyAV opens it) loses the video, not the result."""
    import av

    full = tmp_path / "full"
    full.mkdir()
    real_open = av.open

    def open_(path, mode="r", **kwargs):
        if "w" in mode and str(path).startswith(str(full)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, mode, **kwargs)

    monkeypatch.setattr(av, "open", open_)
    target = tmp_path / "result.json"
    rc = main(["ground", str(clip), "the square", "--model", "test", "--json", str(target),
               "--annotated-video", str(full / "boxes.mp4"), "-q"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, lines
    assert lines[-2] == (f"error: could not write the annotated video {full / 'boxes.mp4'}: "
                         "No space left on device"), lines
    assert lines[-1].endswith(f"the result itself is in {target}"), lines
    assert json.loads(target.read_text())["task"] == "ground"
    assert list(full.iterdir()) == []
