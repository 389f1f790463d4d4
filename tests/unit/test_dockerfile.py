"""The Dockerfile, compose.yaml and .dockerignore against the code they package.

No container is built here (scripts/docker-smoke.sh does that, by hand): these tests read the
Dockerfile's instructions (dockerfile-parse) and compose.yaml (YAML), and compare them with what
the repository says elsewhere: what start_service.sh installs, which ports the app and the
service use, where the data and the Hugging Face cache live. A change on one side that is not
made on the other fails here.
"""
from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import posixpath
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
APP_PORT, API_PORT = 8501, 8080
NEEDED = ["app.py", "views", "chord_ui", "chord_core", "start_service.sh", ".streamlit"]


@pytest.fixture(scope="module")
def docker() -> DockerfileParser:
    return DockerfileParser(str(ROOT / "Dockerfile"))


def instructions(parser: DockerfileParser, name: str) -> list[str]:
    """The values of every ``name`` instruction, in order (continuation lines joined)."""
    return [i["value"] for i in parser.structure if i["instruction"] == name]


def exec_form(value: str) -> list[str]:
    """``["a", "b"]`` (exec form) → list; shell form is refused: signals must reach PID 1."""
    assert value.strip().startswith("["), f"not in exec form: {value}"
    return json.loads(value)


def copies(parser: DockerfileParser) -> dict[str, str]:
    """COPY sources (context paths, no trailing /) → their destination inside the image."""
    workdir, out = "/", {}
    for ins in parser.structure:
        if ins["instruction"] == "WORKDIR":
            workdir = ins["value"].strip()
        if ins["instruction"] != "COPY":
            continue
        words = [w for w in shlex.split(ins["value"]) if not w.startswith("--")]
        *sources, dest = words
        for src in sources:
            target = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
            if target.endswith("/") and not src.endswith("/"):
                target += Path(src).name
            out[src.rstrip("/")] = posixpath.normpath(target)
    return out


def requirement_files(script: str) -> set[str]:
    """The files of every ``pip install … -r FILE`` in a shell script."""
    found = set()
    for cmd in re.findall(r"pip[\"']? install[^\n;&|]*", script):
        found.update(re.findall(r"-r\s+(\S+)", cmd))
    return found


def load_script(name: str) -> ModuleType:
    """A module of scripts/ (they are not a package), registered for dataclasses."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"),
                                                  ROOT / "scripts" / name)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def arg_default(parser: DockerfileParser, name: str) -> str:
    """The default of ``ARG name=…`` (quotes removed)."""
    for value in instructions(parser, "ARG"):
        key, _, default = value.strip().partition("=")
        if key == name:
            return default.strip().strip('"')
    raise AssertionError(f"no ARG {name}")


def test_installs_the_locks_of_what_start_service_installs(docker: DockerfileParser) -> None:
    """The README's install command is ./start_service.sh, which installs requirements.txt
    into .venv; the image installs requirements.lock — the same set, every version pinned and
    hashed (scripts/check_lock.py proves the lock matches requirements.txt) — and every pip run
    in the image checks hashes."""
    readme = (ROOT / "README.md").read_text()
    assert "./start_service.sh" in readme.split("## The two commands", 1)[1][:800]
    assert requirement_files((ROOT / "start_service.sh").read_text()) == {"requirements.txt"}
    assert arg_default(docker, "LOCK") == "requirements.lock"
    check = load_script("check_lock.py")
    assert check.check_pair(ROOT / "requirements.txt", ROOT / "requirements.lock") == []
    sources = copies(docker)
    assert sources["${LOCK}"] == "/tmp/locks/chord.lock"
    runs = [r for r in instructions(docker, "RUN") if "pip install" in r]
    assert runs and all("--require-hashes" in r for r in runs)
    installed = {f for r in runs for f in re.findall(r"-r\s+(/tmp/locks/[\w.-]+)", r)}
    assert installed == {"/tmp/locks/requirements-pip.lock", "/tmp/locks/chord.lock",
                         "/tmp/locks/requirements-gpu.lock"}
    # pip itself first, by hash; test-only packages never: the runtime lock has none
    pip_lock, _ = check.pins(ROOT / "deploy" / "requirements-pip.lock")
    assert set(pip_lock) == {"pip"}
    runtime, _ = check.pins(ROOT / "requirements.lock")
    assert not {"pytest", "playwright", "openai", "dockerfile-parse"} & set(runtime)


def test_copies_what_the_app_needs(docker: DockerfileParser) -> None:
    sources = copies(docker)
    missing = [n for n in NEEDED if n not in sources]
    assert not missing, f"the image lacks {missing}"
    assert sources["app.py"] == "/app/app.py"
    for src in sources:
        path = arg_default(docker, src[2:-1]) if src.startswith("${") else src
        assert (ROOT / path).exists(), f"COPY {src}: no such file in the repository"


def dockerignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip().lstrip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` or a folder above it matches a .dockerignore pattern (no ! rules)."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pat in patterns:
        bare = pat[3:] if pat.startswith("**/") else None
        for p in prefixes:
            if fnmatch.fnmatchcase(p, pat) or (bare and fnmatch.fnmatchcase(Path(p).name, bare)):
                return True
    return False


def test_dockerignore_keeps_copies_and_drops_local_state(docker: DockerfileParser) -> None:
    patterns = dockerignore_patterns()
    assert not any(p.startswith("!") for p in patterns), "the test's matcher has no ! rules"
    for src in copies(docker):
        assert not ignored(src, patterns), f".dockerignore drops {src}, which the image copies"
    for local in [".venv", "data", ".git", ".cache", ".pytest_cache", "test-artifacts",
                  "chord_core/__pycache__", "data/chord.sqlite3"]:
        assert ignored(local, patterns), f".dockerignore lets {local} into the build"


def test_ports_match_the_app_and_the_service(docker: DockerfileParser) -> None:
    from chord_core.service.settings import DEFAULT_PORT

    exposed = {int(p.split("/")[0]) for v in instructions(docker, "EXPOSE") for p in v.split()}
    assert exposed == {APP_PORT, API_PORT}
    assert DEFAULT_PORT == API_PORT
    assert f'PORT="${{CHORD_PORT:-{APP_PORT}}}"' in (ROOT / "start_service.sh").read_text()
    assert docker.envs["CHORD_PORT"] == str(APP_PORT)
    assert docker.envs["CHORD_API_PORT"] == str(API_PORT)


def test_user_is_not_root_and_volumes_hold_cache_and_data(docker: DockerfileParser) -> None:
    users = instructions(docker, "USER")
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    order = [i["instruction"] for i in docker.structure]
    assert order.index("ENTRYPOINT") > len(order) - 1 - order[::-1].index("USER")
    volumes = {v for value in instructions(docker, "VOLUME") for v in exec_form(value)}
    assert docker.envs["HF_HOME"] == "/cache/huggingface"
    assert {docker.envs["HF_HOME"], docker.envs["CHORD_CACHE_DIR"],
            docker.envs["CHORD_DATA_DIR"]} <= volumes


# python3 of the bases the Dockerfile is meant for (Debian/Ubuntu with apt)
BASE_PYTHON = {"ubuntu20.04": (3, 8), "ubuntu22.04": (3, 10), "ubuntu24.04": (3, 12),
               "bookworm": (3, 11), "trixie": (3, 13)}
# requirements.txt's floor: fastapi>=0.165 declares Requires-Python >= 3.11
PYTHON_FLOOR = (3, 11)


def test_base_is_a_build_argument_named_by_digest_with_python_the_requirements_need(
        docker: DockerfileParser) -> None:
    first = docker.structure[[i["instruction"] for i in docker.structure].index("FROM")]
    assert first["value"].strip() == "${BASE}"
    tag, _, digest = docker.baseimage.partition("@")
    assert tag.startswith("nvidia/cuda:")   # the ARG's default: a CUDA base
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), "name the base by digest"
    known = [v for k, v in BASE_PYTHON.items() if tag.endswith(k)]
    assert known, f"which python3 does {tag} have? add it to BASE_PYTHON"
    assert known[0] >= PYTHON_FLOOR, f"{tag} has Python {known[0]}"


def test_apt_installs_pinned_versions_from_a_dated_snapshot(docker: DockerfileParser) -> None:
    pins = arg_default(docker, "APT_PINS").split()
    assert pins and all(re.fullmatch(r"[a-z0-9.+-]+=[0-9][\w.+~:-]*", p) for p in pins), pins
    assert re.fullmatch(r"\d{8}T\d{6}Z", arg_default(docker, "APT_SNAPSHOT"))
    (apt,) = [r for r in instructions(docker, "RUN") if "apt-get install" in r]
    assert "${APT_PINS}" in apt and '--snapshot "${APT_SNAPSHOT}"' in apt
    assert "upgrade" not in apt   # an upgrade would take whatever is newest


def load_health() -> ModuleType:
    spec = importlib.util.spec_from_file_location("container_health",
                                                  ROOT / "scripts" / "container_health.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_runs_a_copied_script(docker: DockerfileParser) -> None:
    (value,) = instructions(docker, "HEALTHCHECK")
    assert "CMD" in value and not value.strip().upper().startswith("NONE")
    cmd = exec_form(value.split("CMD", 1)[1])
    script = next(a for a in cmd if a.endswith(".py"))
    assert script in copies(docker).values(), f"HEALTHCHECK runs {script}, not in the image"


@pytest.mark.parametrize("pid1, urls", [
    (["python", "-m", "streamlit", "run", "app.py", "--server.address", "0.0.0.0",
      "--server.port", "8501"], ["http://127.0.0.1:8501/_stcore/health"]),
    (["/bin/bash", "/app/start_service.sh", "--no-install", "--port=9000", "--api-port", "8080"],
     ["http://127.0.0.1:9000/_stcore/health", "http://127.0.0.1:8080/health"]),
    (["python", "-m", "chord_core", "serve", "--host", "0.0.0.0", "--port", "8081"],
     ["http://127.0.0.1:8081/health"]),
    (["/sbin/docker-init", "--", "python", "-m", "chord_core", "serve", "--port", "8080"],
     ["http://127.0.0.1:8080/health"]),
    ([], ["http://127.0.0.1:8501/_stcore/health"]),
], ids=["app-exec", "app-and-api", "api-only", "api-under-init", "unreadable"])
def test_healthcheck_checks_what_pid1_runs(pid1: list[str], urls: list[str]) -> None:
    assert load_health().urls_to_check(pid1, {"CHORD_PORT": "8501"}) == urls


def test_healthcheck_fails_on_a_closed_port(tmp_path: Path) -> None:
    """Nothing listens on the port: exit status 1 and the URL named."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    health = load_health()
    assert health.check(f"http://127.0.0.1:{port}/health", timeout=2) is False
    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"python\0-m\0chord_core\0serve\0--port\0" + str(port).encode() + b"\0")
    assert health.urls_to_check(health.pid1_args(str(cmdline)), {}) == [
        f"http://127.0.0.1:{port}/health"]


def test_entrypoint_is_start_service_listening_on_all_interfaces(
        docker: DockerfileParser) -> None:
    """What the container runs, with the image's environment: start_service.sh's dry run says
    0.0.0.0, while a normal run (no CHORD_HOST) and config.toml stay on localhost."""
    (entry,) = instructions(docker, "ENTRYPOINT")
    argv = exec_form(entry)
    assert argv[0] == "/app/start_service.sh" and "--no-install" in argv
    assert copies(docker)["start_service.sh"] == argv[0]
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHORD_")}
    image_env = {**base, **{k: v for k, v in docker.envs.items() if k.startswith("CHORD_")}}

    def dry(env: dict[str, str]) -> str:
        return subprocess.run(["bash", str(ROOT / "start_service.sh"), "--dry-run", *argv[1:]],
                              env=env, capture_output=True, text=True, check=True,
                              timeout=30).stdout

    assert "--server.address 0.0.0.0" in dry(image_env)
    assert "--server.address localhost" in dry(base)
    assert 'address = "localhost"' in (ROOT / ".streamlit" / "config.toml").read_text()


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def published(service: dict[str, Any]) -> set[int]:
    """Container ports of ``ports: ["[ip:]host:container"]`` entries."""
    return {int(str(p).rsplit(":", 1)[-1].split("/")[0]) for p in service.get("ports", [])}


def test_compose_runs_app_and_api_on_reserved_gpus(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"app", "api"}
    assert published(services["app"]) == {APP_PORT}
    assert published(services["api"]) == {API_PORT}
    for name, svc in services.items():
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
                   and (d.get("device_ids") or d.get("count")) for d in devices), name
        mounts = {str(v).split(":")[1] for v in svc["volumes"]}
        assert {"/cache/huggingface", "/data"} <= mounts, name
    api = services["api"]
    assert api["entrypoint"][:4] == ["python", "-m", "chord_core", "serve"]
    assert api["entrypoint"][api["entrypoint"].index("--port") + 1] == str(API_PORT)
    assert "CHORD_API_KEY" in api["environment"]
    assert load_health().urls_to_check(api["entrypoint"], {}) == [
        f"http://127.0.0.1:{API_PORT}/health"]


def test_compose_publishes_on_loopback_only(compose: dict[str, Any]) -> None:
    """The app has no login: compose publishes on the host's 127.0.0.1 unless edited."""
    for svc in compose["services"].values():
        for p in svc["ports"]:
            assert str(p).startswith("127.0.0.1:"), p


@pytest.mark.parametrize(("code", "body", "ok", "said"), [
    (200, b'{"status": "ready", "workers": []}', True, "ok"),
    (503, b'{"status": "loading", "error": "the model is still loading"}', False, "loading"),
    (503, b'{"status": "failed", "error": "out of memory"}', False, "failed"),
    (200, b"ok", True, "ok"),
], ids=["api-ready", "api-loading", "api-failed", "app-plain"])
def test_healthcheck_reports_the_api_state(code: int, body: bytes, ok: bool, said: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    """A real HTTP server on 127.0.0.1 answers as the service's /health does: the check's
    status follows the code and its log line names the service's state."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with caplog.at_level("INFO", logger="chord.health"):
            url = f"http://127.0.0.1:{server.server_address[1]}/health"
            assert load_health().check(url, timeout=5) is ok
    finally:
        server.shutdown()
        server.server_close()
    assert said in caplog.text and str(code) in caplog.text
