"""``python -m chord_core chapters`` (and ground-long, search) hand the run to a running
``serve`` as the one-clip commands do (issue 38): the same outputs from the service's
document, no model in the CLI's process, and the run here when an option needs it."""

from __future__ import annotations

import argparse
import json
import urllib.request
from pathlib import Path

import pytest
from service_server import Server
from test_cli_remote import _cli, _imported

from chord_core.cli import remote_long
from chord_core.errors import ConfigError
from chord_core.testing.videos import make_video

SETTINGS = ("--chunk-s", "4", "--cuts", "fixed", "--chapter-s", "6", "--frames-per-chunk",
            "4", "--max-new-tokens", "128")


def _run_of(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if x.startswith("note: running on the Chord"))
    return line.rsplit("run ", 1)[1].split(";")[0].strip()


@pytest.fixture(scope="module")
def clip(server: Server) -> Path:
    return make_video(server.media / "cli-long.mp4", duration_s=12.0, fps=8.0,
                      size_wh=(96, 64), seed=2).path  # its own content: its own runs


def test_chapters_runs_on_the_found_service_and_writes_every_output(
        server: Server, clip: Path, tmp_path: Path) -> None:
    out = _cli("chapters", str(clip), *SETTINGS, "--json", str(tmp_path / "c.json"),
               "--vtt", str(tmp_path / "c.vtt"), "--md", str(tmp_path / "c.md"),
               data=server.data)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["schema"] == "chord.chapters/v1" and len(doc["chunks"]) == 3
    assert (tmp_path / "c.vtt").read_text().startswith("WEBVTT")
    assert (tmp_path / "c.md").read_text().strip()
    assert "chunks 3/3" in out.stderr  # the service's progress, a line per chunk
    assert "test model" in out.stderr
    mods = _imported(out.stderr)
    assert "chord_core.cli.remote_long" in mods
    assert not {"torch", "transformers", "accelerate"} & mods  # no model here
    run = _run_of(out.stderr)
    assert run == doc["run_id"]
    with urllib.request.urlopen(f"{server.url}/v1/jobs/{run}", timeout=10) as resp:
        view = json.loads(resp.read())
    assert view["state"] == "done" and view["document"] == doc  # the service made it


def test_ground_long_and_search_run_on_the_named_service(server: Server, clip: Path,
                                                         tmp_path: Path) -> None:
    out = _cli("ground-long", str(clip), "the square", "--fps", "1", "--ground-tokens", "24",
               "--server", server.url, "-q", data=tmp_path / "elsewhere")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["schema"] == "chord.result/v1" and doc["task"] == "ground"
    assert _run_of(out.stderr).startswith("lvg-")
    out = _cli("search", str(clip), "a square moves", *SETTINGS, "--max-chapters", "1",
               "--max-frames", "4", "--server", server.url, data=tmp_path / "elsewhere")
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout)
    assert found["query"] == "a square moves" and "hits" in found
    assert _run_of(out.stderr).startswith("lvs-")


def test_settings_the_service_refuses_exit_2(server: Server, clip: Path) -> None:
    """A setting this process takes but the service bounds (frames a chunk): its 4xx is
    the CLI's bad-input exit; one this process refuses never reaches the service."""
    out = _cli("chapters", str(clip), "--frames-per-chunk", "1000", data=server.data)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = [x for x in out.stderr.splitlines() if not x.startswith("import time:")]
    assert lines[-2].startswith("error:") and "frames_per_chunk" in lines[-2], lines
    assert lines[-1].startswith("hint:") and "Traceback" not in out.stderr
    out = _cli("chapters", str(clip), "--chunk-s", "0.5", data=server.data)
    assert out.returncode == 2 and "the chunk length must be 1–3600 s" in out.stderr
    assert "running on the Chord service" not in out.stderr


def _args(**kw: object) -> argparse.Namespace:
    base = dict(command="chapters", server=None, local=False, in_process=False, gpus=None,
                cpu_workers=None, config=None, model=None, device=None, max_memory=None,
                allow_offload=None, batch_size=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("option", [{"in_process": True}, {"gpus": "0"},
                                    {"cpu_workers": 2}, {"chapters_json": "c.json"}], ids=str)
def test_options_of_this_process_keep_the_run_here(option: dict) -> None:
    url, why = remote_long.choose(_args(**option))
    assert url is None and "runs it in this process" in why
    with pytest.raises(ConfigError, match="needs the run in this process"):
        remote_long.choose(_args(server="http://127.0.0.1:9", **option))


def test_no_service_runs_here(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CHORD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("CHORD_SERVER", raising=False)
    url, why = remote_long.choose(_args())
    assert url is None and why


def test_an_option_of_this_process_runs_the_same_chapters_here(
        server: Server, clip: Path, tmp_path: Path) -> None:
    """The service is advertised, but ``--in-process`` keeps the run here: the same
    document (chunks, chapters' times) as the service's, made by this process."""
    here = _cli("chapters", str(clip), *SETTINGS, "--in-process", "--model", "test",
                "--json", str(tmp_path / "here.json"), data=tmp_path / "here-data")
    assert here.returncode == 0, here.stderr[-2000:]
    assert "running on the Chord service" not in here.stderr
    assert "torch" in _imported(here.stderr)  # the model was loaded here
    there = _cli("chapters", str(clip), *SETTINGS, "-q", data=server.data)
    assert there.returncode == 0, there.stderr[-2000:]
    local, remote = json.loads((tmp_path / "here.json").read_text()), json.loads(there.stdout)
    assert local["run_id"] == remote["run_id"]  # the same run: same clip, settings, model
    for key in ("chunks", "settings", "video"):
        assert local[key] == remote[key], key
    assert [(c["start_s"], c["end_s"]) for c in local["chapters"]] == \
        [(c["start_s"], c["end_s"]) for c in remote["chapters"]]


def test_a_clip_outside_the_service_roots_is_uploaded_for_its_chapters(
        server: Server, tmp_path: Path) -> None:
    mine = make_video(tmp_path / "mine.mp4", duration_s=8.0, fps=8.0, size_wh=(96, 64),
                      seed=3).path
    out = _cli("chapters", str(mine), *SETTINGS, "--server", server.url, "-q",
               data=tmp_path / "elsewhere")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "uploaded (outside the service's media roots)" in out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "chord.chapters/v1" and len(doc["chunks"]) == 2
    assert doc["video"]["width"] == 96 and str(tmp_path) not in doc["video"]["path"]
