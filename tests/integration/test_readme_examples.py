"""Every shell and Python example of README.md runs as written (read from the README itself):
the app and the service started the README's way, inputs made the way the README says
(``python -m chord_core example-clip``). Blocks that cannot run here carry a reason in the
README and are counted; see ``readme_runner.py`` for the markers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from readme_runner import extract, mirror_checkout, problems

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RUNNER = Path(__file__).with_name("readme_runner.py")
FIXED_PORTS = (8080, 8501)  # the README's own


def test_every_block_runs_or_says_why_not() -> None:
    blocks = extract(README.read_text())
    assert problems(blocks) == []
    modes = [b.mode for b in blocks if b.runnable]
    assert modes.count("run") >= 8 and "server" in modes and "setup" in modes


@pytest.mark.parametrize(("text", "mode", "arg"), [
    ("<!-- readme-test: skip needs a GPU -->\n```bash\nnvidia-smi\n```\n", "skip", "needs a GPU"),
    ("<!-- readme-test: server http://127.0.0.1:8080/health -->\n\n```bash\nserve\n```\n",
     "server", "http://127.0.0.1:8080/health"),
    ("<!-- readme-test: setup -->\n```bash\nexport A=1\n```\n", "setup", ""),
    ("```python\nprint(1)\n```\n", "run", ""),
    ("```jsonc\n{}\n```\n", "text", ""),
    ("<!-- readme-test: skip -->\n```bash\nx\n```\n", "skip", ""),
], ids=["skip", "server-after-blank", "setup", "plain-run", "other-language", "skip-no-reason"])
def test_markers_are_read(text: str, mode: str, arg: str) -> None:
    (block,) = extract("## S\n" + text)
    assert (block.mode, block.arg, block.section) == (mode, arg, "S")
    assert bool(problems([block])) == (mode == "skip" and not arg)


def test_a_fence_without_language_is_a_problem() -> None:
    (block,) = extract("```\npython -m chord_core probe clip.mp4\n```\n")
    assert problems([block]) == ["README.md:1: a fence without a language (```bash, "
                                 "```python, ```text…)"]


def _namespace_prefix() -> list[str]:
    """``unshare -rn --kill-child`` where user namespaces work (a private loopback: the
    README's fixed ports cannot clash with other tests); else nothing, if the ports are free."""
    probe = ["unshare", "-rn", "--kill-child", "true"]
    if shutil.which("unshare") and subprocess.run(probe, capture_output=True).returncode == 0:
        return ["unshare", "-rn", "--kill-child"]
    for port in FIXED_PORTS:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail(f"port {port} is in use and this machine has no user namespaces "
                            "(unshare -rn) to run the README's examples apart")
    return []


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_readme_examples_run_as_written(tmp_path: Path, tiny_model_dir: Path) -> None:
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    mirror_checkout(ROOT, workdir)
    report = tmp_path / "report.json"
    prefix = _namespace_prefix()
    env = dict(os.environ, README_TEST_NETNS="1" if prefix else "0")
    done = subprocess.run([*prefix, sys.executable, str(RUNNER), str(README), str(workdir),
                           str(report)], env=env, capture_output=True, text=True, timeout=1750)
    assert done.returncode == 0, done.stderr[-4000:]
    outcomes = json.loads(report.read_text())
    ran = [o for o in outcomes if o["mode"] != "skip"]
    skipped = [o for o in outcomes if o["mode"] == "skip"]
    print(f"\nREADME: {len(ran)} blocks ran, {len(skipped)} not run here:")
    for o in outcomes:
        what = f"skip ({o['reason']})" if o["mode"] == "skip" else f"rc {o['rc']}, {o['seconds']:.1f} s"
        print(f"  README.md:{o['line']:<4} {o['mode']:<6} {what:<40} {o['first_line'][:60]}")
    failed = [o for o in ran if o["rc"] != 0]
    assert not failed, "\n\n".join(
        f"README.md:{o['line']} ({o['section']}) exited {o['rc']}:\n{o['output']}" for o in failed)
    assert len(ran) == len(extract(README.read_text())) - len(skipped) - sum(
        1 for b in extract(README.read_text()) if b.mode == "text")
