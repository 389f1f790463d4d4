"""The lock files against the requirement files (scripts/check_lock.py), and the check itself.

The repository's own locks must pass; copies of them broken in one way each must fail with a
line that names the package and what is wrong.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_lock", ROOT / "scripts" / "check_lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_repository_locks_match_their_requirement_files() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_lock.py")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "the locks match requirements.txt" in out.stderr


def test_every_pin_has_hashes_and_the_runtime_set_is_inside_the_dev_set() -> None:
    check = load_check()
    runtime, problems = check.pins(ROOT / "requirements.lock")
    dev, dev_problems = check.pins(ROOT / "requirements-dev.lock")
    assert not problems and not dev_problems
    assert {"torch", "torchvision", "transformers", "streamlit", "fastapi"} <= set(runtime)
    assert set(runtime) <= set(dev)
    assert "pytest" in dev and "pytest" not in runtime   # test-only packages stay out
    assert all(p.hashes and all(h.startswith("sha256:") for h in p.hashes)
               for branch in runtime.values() for p in branch)


def _copy(tmp_path: Path) -> Path:
    for req, lock in load_check().PAIRS:
        for name in (req, lock):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _edit(path: Path, pattern: str, repl: str) -> None:
    text = path.read_text()
    new, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern
    path.write_text(new)


@pytest.mark.parametrize(("file", "pattern", "repl", "said"), [
    ("requirements.txt", r"^pillow>=10,<13$", "pillow>=10,<12", "pillow==12.3.0 is outside"),
    ("requirements.txt", r"\Z", "\nwebcolors>=24,<26\n", "webcolors (<26,>=24) is not pinned"),
    ("requirements.lock", r"^(pyyaml==[0-9.]+) \\\n(\s+--hash=\S+ \\\n)*\s+--hash=\S+\n",
     r"\1\n", "has no --hash"),
    ("requirements.lock", r"^torch==2\.14\.1", "torch>=2.14", "torch is not pinned with =="),
    ("requirements-dev.lock", r"^numpy==([0-9.]+)", "numpy==1.26.4",
     "numpy is "),
], ids=["range-tightened", "new-requirement", "hash-missing", "not-exact", "locks-disagree"])
def test_a_lock_that_no_longer_matches_is_reported(tmp_path: Path, file: str, pattern: str,
                                                   repl: str, said: str) -> None:
    root = _copy(tmp_path)
    check = load_check()
    assert check.check(root) == []
    _edit(root / file, pattern, repl)
    problems = check.check(root)
    assert any(said in p for p in problems), problems
    assert check.main(["--root", str(root), "--quiet"]) == 1


def test_a_missing_lock_is_reported(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "deploy" / "requirements-gpu.lock").unlink()
    assert load_check().check(root) == [
        "requirements-gpu.lock is missing (made from requirements-gpu.txt)"]
