"""A long run's chunk jobs are read under the media roots like a short job (issue 25): a
chunk of a clip inside the roots carries them to its worker, so a link swapped in after the
run was planned is refused when the chunk opens the file; a clip outside the roots (the CLI's
own file) runs unconfined as before."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from chord_core.analysis.request import AnalysisRequest, probe_input
from chord_core.errors import InputError
from chord_core.longvideo import runs
from chord_core.media import confined
from chord_core.runtime.jobs import JobSpec
from chord_core.testing.videos import make_video


@pytest.fixture
def clips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    media = tmp_path / "media"
    media.mkdir()
    monkeypatch.setenv("CHORD_MEDIA_ROOTS", str(media))
    inside = make_video(media / "long.mp4", duration_s=1.0, size_wh=(64, 48)).path
    outside = make_video(tmp_path / "outside.mp4", duration_s=2.0, size_wh=(160, 120)).path
    return {"root": Path(os.path.realpath(media)), "inside": Path(os.path.realpath(inside)),
            "outside": outside}


def _submitted(path: Path) -> JobSpec:
    """The chunk's spec as the run hands it to the runtime's stage (``runs._confined``)."""
    job = runs.ChunkJob("lvtest-c0000", JobSpec(AnalysisRequest(str(path), "describe")))
    return runs._confined(job.spec)


def test_a_chunk_inside_the_roots_is_opened_under_them_in_its_worker(clips) -> None:
    spec = _submitted(clips["inside"])
    assert str(clips["root"]) in spec.request.media_roots
    with confined._LOCK:  # as in a fresh worker process, which gets the spec by pickle
        confined._CONFINED.pop(confined._key(clips["inside"]), None)
    pickle.loads(pickle.dumps(spec))
    clips["inside"].unlink()
    os.symlink(clips["outside"], clips["inside"])  # swapped after the run was planned
    with pytest.raises(InputError, match="is not a file under the media roots") as err:
        probe_input(clips["inside"])
    assert "160" not in str(err.value.to_dict())  # nothing of the outside file comes back


def test_a_chunk_of_a_clip_outside_the_roots_runs_as_before(clips) -> None:
    spec = _submitted(clips["outside"])
    assert spec.request.media_roots is None
    assert probe_input(clips["outside"]).width == 160
