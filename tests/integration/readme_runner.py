"""Run the README's shell and Python examples as written, in order, as a reader would.

The README is the source: its fenced blocks are read from README.md itself. A shell block runs
in ``bash -e`` and a Python block through ``python -`` (the ``python`` of the activated
``.venv``), in one working folder that mirrors the checkout (every top-level entry linked,
``data/`` and outputs its own), so one block's outputs (a clip, a job id file) are the next
block's inputs. An HTML comment on the line(s) just above a fence says how the test treats it:

``<!-- readme-test: setup -->``
    run it; the environment it leaves (``source``, ``export``) is every later block's.
``<!-- readme-test: server URL -->``
    it starts a server that keeps running: started in the background, waited for until URL
    answers 200, stopped at the next server block or the end of its ``##`` section.
``<!-- readme-test: skip REASON -->``
    not run here (a GPU, Docker, a hub download, a cluster): counted and listed with the
    reason, never skipped silently.

Blocks in another language (``jsonc``, ``text``, ``caddyfile``…) are not examples to run; a
fence without a language is an error (nobody could tell whether it should run).

``python tests/integration/readme_runner.py README.md WORKDIR REPORT.json`` runs everything
and writes one report entry per block. The test runs it inside a private network namespace
(``unshare -rn``) so the README's fixed ports (8080, 8501) cannot meet another test's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py"}
NOT_RUN = {"jsonc", "json", "text", "caddyfile", "yaml", "toml", "ini", "dockerfile"}
MARKER = re.compile(r"<!--\s*readme-test:\s*(setup|server|skip)\b\s*(.*?)\s*-->")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
BLOCK_TIMEOUT_S = 420.0
SERVER_WAIT_S = 240.0
KEEP = {"data", "test-artifacts", ".git", ".pytest_cache", "__pycache__", ".venv"}


@dataclass
class Block:
    """One fenced block of the README."""

    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    section: str
    mode: str = "run"  # run | setup | server | skip | text
    arg: str = ""  # the server's URL or the skip reason

    @property
    def runnable(self) -> bool:
        return self.lang in SHELL | PYTHON


@dataclass
class Outcome:
    line: int
    mode: str
    section: str
    rc: int | None = None
    seconds: float = 0.0
    output: str = ""
    reason: str = ""
    first_line: str = field(default="")


def _marker_above(lines: list[str], fence_index: int) -> tuple[str, str] | None:
    """The readme-test marker on the non-blank lines right above a fence, if any."""
    k = fence_index - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    if k >= 0 and (m := MARKER.search(lines[k])):
        return m.group(1), m.group(2).strip().lstrip("—–-:").strip()
    return None


def extract(text: str) -> list[Block]:
    """Every fenced block of the README, with the marker that applies to it."""
    lines, blocks, section, k = text.splitlines(), [], "", 0
    while k < len(lines):
        if lines[k].startswith("## "):
            section = lines[k][3:].strip()
        m = FENCE.match(lines[k])
        if not m:
            k += 1
            continue
        indent, lang, start = m.group(1), m.group(2).lower(), k
        k += 1
        body = []
        while k < len(lines) and not lines[k].strip().startswith("```"):
            body.append(lines[k][len(indent):] if lines[k].startswith(indent) else lines[k])
            k += 1
        block = Block(start + 1, lang, "\n".join(body) + "\n", section)
        marker = _marker_above(lines, start)
        if marker:
            block.mode, block.arg = marker
        elif not block.runnable:
            block.mode = "text"
        blocks.append(block)
        k += 1
    return blocks


def problems(blocks: list[Block]) -> list[str]:
    """What is wrong with the README's blocks as test material (empty: nothing)."""
    out = []
    for b in blocks:
        where = f"README.md:{b.line}"
        if not b.lang:
            out.append(f"{where}: a fence without a language (```bash, ```python, ```text…)")
        elif not b.runnable and b.lang not in NOT_RUN:
            out.append(f"{where}: unknown language {b.lang!r}")
        if b.mode == "skip" and len(b.arg) < 8:
            out.append(f"{where}: a skip marker must say why the block cannot run here")
        if b.mode == "server" and not b.arg.startswith("http"):
            out.append(f"{where}: a server marker needs the URL that answers when it is up")
        if b.mode in ("setup", "server", "skip") and not b.runnable:
            out.append(f"{where}: a readme-test marker on a {b.lang} block")
    return out


def _script(block: Block) -> str:
    if block.lang in PYTHON:
        return f"python - <<'README_PY'\n{block.code}README_PY\n"
    return block.code


def _run(block: Block, workdir: Path, env: dict[str, str], capture_env: Path | None = None
         ) -> tuple[int, str]:
    script = "set -e\n" + _script(block)
    if capture_env is not None:
        script += f"\nenv -0 > {capture_env}\n"
    try:
        done = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, text=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode()
        return 124, out + f"\n[timed out after {BLOCK_TIMEOUT_S:.0f} s]"
    return done.returncode, done.stdout


def _read_env(path: Path) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in path.read_text().split("\0") if "=" in item]
    return {k: v for k, v in pairs if not k.startswith("BASH_FUNC_") and k not in ("_", "PWD",
                                                                                  "SHLVL", "OLDPWD")}


class Servers:
    """The servers the README's server blocks started, each its own process group."""

    def __init__(self) -> None:
        self.running: list[tuple[subprocess.Popen, Path]] = []

    def start(self, block: Block, workdir: Path, env: dict[str, str], log: Path) -> Outcome:
        out = Outcome(block.line, "server", block.section, first_line=block.code.split("\n")[0])
        t0 = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", "set -e\n" + _script(block)], cwd=workdir,
                                env=env, stdin=subprocess.DEVNULL, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.running.append((proc, log))
        while time.monotonic() - t0 < SERVER_WAIT_S:
            if proc.poll() is not None:
                out.rc = proc.returncode or 1
                break
            try:
                with urllib.request.urlopen(block.arg, timeout=3) as resp:
                    if resp.status == 200:
                        out.rc = 0
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        else:
            out.rc = 124
        out.seconds = time.monotonic() - t0
        if out.rc:
            out.output = log.read_text(errors="replace")[-4000:]
        return out

    def stop_all(self) -> None:
        for proc, _ in self.running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.running:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.running.clear()


def mirror_checkout(root: Path, workdir: Path) -> None:
    """A working folder that looks like the checkout: every top-level entry linked, except
    the data and outputs a reader's commands write. ``.venv`` is a folder of links to the
    real one, with its own stamp saying requirements.txt is installed (the test run's
    ``run_tests.sh`` installed it), so ``./start_service.sh`` starts without installing."""
    import hashlib

    for entry in root.iterdir():
        if entry.name not in KEEP:
            (workdir / entry.name).symlink_to(entry)
    venv = workdir / ".venv"
    venv.mkdir()
    for entry in (root / ".venv").resolve().iterdir():
        if not entry.name.startswith(".chord-"):
            (venv / entry.name).symlink_to(entry)
    want = hashlib.sha256((root / "requirements.txt").read_bytes()).hexdigest()
    (venv / ".chord-requirements.sha256").write_text(want + "\n")


def run_all(readme: Path, workdir: Path) -> list[Outcome]:
    """Run every block of ``readme`` in ``workdir`` (already mirrored), in order."""
    blocks = extract(readme.read_text())
    env = {k: v for k, v in os.environ.items() if k != "CHORD_DATA_DIR"}
    servers, outcomes, section = Servers(), [], None
    try:
        for n, block in enumerate(blocks):
            if block.section != section:
                servers.stop_all()
                section = block.section
            first = block.code.strip().split("\n")[0][:100]
            if block.mode == "text":
                continue
            if block.mode == "skip":
                outcomes.append(Outcome(block.line, "skip", block.section, reason=block.arg,
                                        first_line=first))
                continue
            if block.mode == "server":
                servers.stop_all()
                outcomes.append(servers.start(block, workdir, env, workdir / f"server-{n}.log"))
                continue
            t0 = time.monotonic()
            envfile = workdir / f".env-{n}" if block.mode == "setup" else None
            rc, output = _run(block, workdir, env, envfile)
            if envfile is not None and rc == 0:
                env = _read_env(envfile)
            outcomes.append(Outcome(block.line, block.mode, block.section, rc=rc,
                                    seconds=time.monotonic() - t0, output=output[-4000:],
                                    first_line=first))
    finally:
        servers.stop_all()
    return outcomes


def main(argv: list[str]) -> int:
    readme, workdir, report = Path(argv[0]), Path(argv[1]), Path(argv[2])
    if os.environ.get("README_TEST_NETNS") == "1":  # a fresh namespace: loopback is down
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    outcomes = run_all(readme, workdir)
    report.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
