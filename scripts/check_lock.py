"""Do the lock files still match the requirement files they were made from?

``requirements.lock``, ``requirements-dev.lock``, ``deploy/requirements-gpu.lock`` and
``deploy/requirements-pip.lock`` are made by ``bash scripts/lock.sh`` (uv) from the requirement
file of the same name (``.txt``). The Dockerfile and ``run_tests.sh`` install the locks with
``pip --require-hashes``, so a range edited in a requirement file without a new lock would
silently not apply. This check fails when:

* a package named in a requirement file has no pin in its lock, or a pin outside its range;
* a pin has no ``--hash`` (pip's hash mode would refuse the whole file) or is not ``==``;
* two locks pin the same package at different versions (the runtime set inside the dev set,
  the GPU extras on top of the runtime set: one image, one version of each package).

Run by ``run_tests.sh`` before the tests and by tests/unit/test_lockfiles.py. Needs only
``packaging`` (installed with pip's tools everywhere the tests run).
"""
from __future__ import annotations

import argparse
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

log = logging.getLogger("chord.lock")
ROOT = Path(__file__).resolve().parents[1]
# requirement file → the lock made from it (lock.sh's order)
PAIRS = [("requirements.txt", "requirements.lock"),
         ("requirements-dev.txt", "requirements-dev.lock"),
         ("deploy/requirements-gpu.txt", "deploy/requirements-gpu.lock"),
         ("deploy/requirements-pip.txt", "deploy/requirements-pip.lock")]
HINT = "regenerate the locks: bash scripts/lock.sh (README \"Locked installs\")"


@dataclass(frozen=True)
class Pin:
    """One ``name==version`` line of a lock, with its environment marker and hashes."""

    name: str
    version: str
    marker: str
    hashes: tuple[str, ...]


def ranges(path: Path) -> dict[str, Requirement]:
    """The requirements of a requirement file and of the files it includes with ``-r``."""
    out: dict[str, Requirement] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            out.update(ranges(path.parent / line.split(None, 1)[1]))
            continue
        req = Requirement(line)
        out[canonicalize_name(req.name)] = req
    return out


def pins(path: Path) -> tuple[dict[str, list[Pin]], list[str]]:
    """A lock's pins by package (one per marker branch) and the problems found reading it."""
    found: dict[str, list[Pin]] = {}
    problems: list[str] = []
    text = path.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        spec, *hash_parts = re.split(r"\s--hash[= ]", line)
        try:
            req = Requirement(spec.strip())
        except InvalidRequirement as exc:
            problems.append(f"{path.name}: cannot read {spec.strip()!r}: {exc}")
            continue
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            problems.append(f"{path.name}: {req.name} is not pinned with == ({req.specifier})")
            continue
        hashes = tuple(h.strip() for h in hash_parts if h.strip())
        if not hashes:
            problems.append(f"{path.name}: {req.name}=={specs[0].version} has no --hash")
        name = canonicalize_name(req.name)
        found.setdefault(name, []).append(
            Pin(name, specs[0].version, str(req.marker or ""), hashes))
    return found, problems


def check_pair(req_file: Path, lock_file: Path) -> list[str]:
    """Every range of ``req_file`` is pinned in ``lock_file`` by a version inside it."""
    if not lock_file.is_file():
        return [f"{lock_file.name} is missing (made from {req_file.name})"]
    locked, problems = pins(lock_file)
    for name, req in ranges(req_file).items():
        if name not in locked:
            problems.append(f"{lock_file.name}: {req.name} ({req.specifier}) is not pinned")
            continue
        for pin in locked[name]:
            if not req.specifier.contains(pin.version, prereleases=True):
                problems.append(f"{lock_file.name}: {name}=={pin.version} is outside "
                                f"{req_file.name}'s range {req.specifier}")
    return problems


def check_agreement(locks: dict[str, dict[str, list[Pin]]]) -> list[str]:
    """The same package at the same version (per marker) in every lock that pins it."""
    problems: list[str] = []
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for lock_name, locked in locks.items():
        for name, branch in locked.items():
            for pin in branch:
                key = (name, pin.marker)
                first = seen.setdefault(key, (lock_name, pin.version))
                if first[1] != pin.version:
                    problems.append(f"{name} is {first[1]} in {first[0]} but {pin.version} "
                                    f"in {lock_name}")
    return problems


def check(root: Path = ROOT) -> list[str]:
    """All problems of the repository's locks (empty: they match their requirement files)."""
    problems: list[str] = []
    locks: dict[str, dict[str, list[Pin]]] = {}
    for req_name, lock_name in PAIRS:
        problems += check_pair(root / req_name, root / lock_name)
        if (root / lock_name).is_file():
            locks[lock_name] = pins(root / lock_name)[0]
    return problems + check_agreement(locks)


def main(argv: list[str] | None = None) -> int:
    """Print each problem with the hint; exit 1 when there is any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this)")
    parser.add_argument("--quiet", action="store_true", help="print nothing when all is well")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    problems = check(args.root)
    for p in problems:
        log.error("error: %s", p)
    if problems:
        log.error("hint: %s", HINT)
        return 1
    if not args.quiet:
        log.info("the locks match %s", ", ".join(r for r, _ in PAIRS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
