"""The GPU image as a recipe: deploy/k8s against the Kubernetes schemas, the 8-GPU compose file
against compose.yaml, and the CUDA versions of the base, the locked torch and the README's driver.

No cluster and no GPU host runs containers here, so these are static checks against the real
schemas (kubernetes-validate ships Kubernetes' own OpenAPI-derived JSON schemas) and against the
files the image is built from.
"""
from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.37.0"   # the newest schemas kubernetes-validate 1.37 ships
MANIFESTS = sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
# NVIDIA's minimum Linux driver for each CUDA toolkit (CUDA release notes, "CUDA Toolkit and
# Minimum Required Driver Version"): the image's CUDA must appear here with the README's value
DRIVER_MIN = {"12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"}


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"),
                                                  ROOT / "scripts" / name)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def documents() -> list[dict[str, Any]]:
    return [d for m in MANIFESTS for d in yaml.safe_load_all(m.read_text()) if d]


def validate(doc: dict[str, Any]) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.fixture(scope="module")
def docker() -> DockerfileParser:
    return DockerfileParser(str(ROOT / "Dockerfile"))


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    (dep,) = [d for d in documents() if d["kind"] == "Deployment"]
    return dep


def test_every_manifest_is_valid_against_the_kubernetes_schemas() -> None:
    docs = documents()
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "PersistentVolumeClaim"}
    for doc in docs:
        validate(doc)


@pytest.mark.parametrize(("path", "value", "said"), [
    (["spec", "template", "spec", "containers", 0, "livenesProbe"], {}, "livenesProbe"),
    (["spec", "replicas"], "one", "replicas"),
    (["spec", "template", "spec", "containers", 0, "ports", 0, "containerPort"], "app",
     "containerPort"),
], ids=["misspelled-field", "wrong-type", "port-not-a-number"])
def test_a_broken_deployment_is_refused(deployment: dict[str, Any], path: list[Any],
                                        value: Any, said: str) -> None:
    """The validator really checks: one wrong field each, each refused with its name."""
    import kubernetes_validate

    broken = copy.deepcopy(deployment)
    node = broken
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError) as err:
        validate(broken)
    assert said in str(err.value) or said in str(getattr(err.value, "path", ""))


def test_the_pod_runs_the_image_as_built(deployment: dict[str, Any],
                                         docker: DockerfileParser) -> None:
    """Ports, user, volumes and the command are the Dockerfile's; the API (and so /health)
    runs because the arguments ask for it, and the health script agrees."""
    pod = deployment["spec"]["template"]["spec"]
    (box,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in box["ports"]}
    exposed = {int(p) for v in [i["value"] for i in docker.structure
                                if i["instruction"] == "EXPOSE"] for p in v.split()}
    assert set(ports.values()) == exposed == {8501, 8080}
    entry = yaml.safe_load([i["value"] for i in docker.structure
                            if i["instruction"] == "ENTRYPOINT"][0])
    health = load_script("container_health.py")
    assert health.urls_to_check([*entry, *box["args"]], {"CHORD_PORT": "8501"}) == [
        "http://127.0.0.1:8501/_stcore/health", f"http://127.0.0.1:{ports['api']}/health"]
    uid = next(i["value"].split("=")[1] for i in docker.structure
               if i["instruction"] == "ARG" and i["value"].startswith("CHORD_UID="))
    assert pod["securityContext"]["runAsUser"] == int(uid) and pod["securityContext"]["runAsNonRoot"]
    mounts = {m["mountPath"] for m in box["volumeMounts"]}
    assert {docker.envs["HF_HOME"], docker.envs["CHORD_CACHE_DIR"],
            docker.envs["CHORD_DATA_DIR"], "/dev/shm"} <= mounts
    key = next(e for e in box["env"] if e["name"] == "CHORD_API_KEY")
    assert "secretKeyRef" in key["valueFrom"], "the API key comes from a Secret, not the file"
    assert int(box["resources"]["limits"]["nvidia.com/gpu"]) >= 1


def test_probes_ask_the_api_health_with_a_host_it_accepts(deployment: dict[str, Any]) -> None:
    (box,) = deployment["spec"]["template"]["spec"]["containers"]
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = box[name]["httpGet"]
        assert get["path"] == "/health" and get["port"] == "api", name
        assert {"name": "Host", "value": "localhost"} in get["httpHeaders"], name
    # loading may take long: the startup probe's budget, then liveness allows minutes
    start = box["startupProbe"]
    assert start["periodSeconds"] * start["failureThreshold"] >= 600
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def _without_gpus(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["x-chord"].pop("build")
    for svc in out["services"].values():
        svc.pop("deploy")
        svc.pop("build", None)
    return out


def test_the_8_gpu_compose_file_is_compose_yaml_with_eight_gpus() -> None:
    one = yaml.safe_load((ROOT / "compose.yaml").read_text())
    eight = yaml.safe_load((ROOT / "deploy" / "compose.8gpu.yaml").read_text())
    assert _without_gpus(one) == _without_gpus(eight)
    assert (ROOT / "deploy" / eight["services"]["app"]["build"]["context"]).resolve() == ROOT
    gpus = [d["device_ids"] for s in eight["services"].values()
            for d in s["deploy"]["resources"]["reservations"]["devices"]]
    flat = [g for ids in gpus for g in ids]
    assert sorted(flat, key=int) == [str(i) for i in range(8)], "eight GPUs, none shared"


def cuda_of_base(docker: DockerfileParser) -> tuple[str, str]:
    """(CUDA major.minor, flavour) of the default base, e.g. ("13.0", "base")."""
    m = re.match(r"nvidia/cuda:(\d+\.\d+)\.\d+-(base|runtime|devel)", docker.baseimage)
    assert m, docker.baseimage
    return m.group(1), m.group(2)


def test_cuda_of_the_base_the_locked_torch_and_the_driver_agree(
        docker: DockerfileParser) -> None:
    """The base's CUDA is the CUDA of the torch wheel the lock pins (its cuda-toolkit pin),
    the container toolkit is told to refuse older drivers, and the README names the driver."""
    base_cuda, flavour = cuda_of_base(docker)
    assert flavour == "base", "the runtime/devel flavours repeat the CUDA libraries pip installs"
    pins, _ = load_script("check_lock.py").pins(ROOT / "requirements.lock")
    toolkit = pins["cuda-toolkit"][0].version          # e.g. 13.0.3.0: the CUDA torch needs
    assert ".".join(toolkit.split(".")[:2]) == base_cuda, (toolkit, base_cuda)
    assert pins["nvidia-cuda-runtime"][0].version.startswith(base_cuda + ".")
    torch_pin = pins["torch"][0].version
    if importlib.metadata.version("torch") == torch_pin:   # the wheel's own declaration
        needs = [r for r in importlib.metadata.requires("torch") or []
                 if r.startswith("cuda-toolkit")]
        assert needs and re.search(rf"==\s*{re.escape(base_cuda)}\.", needs[0]), needs
    assert docker.envs["NVIDIA_REQUIRE_CUDA"] == f"cuda>={base_cuda}"
    assert "video" in docker.envs["NVIDIA_DRIVER_CAPABILITIES"].split(",")   # NVDEC
    readme = (ROOT / "README.md").read_text()
    section = readme.split("**GPU image.**", 1)[1][:3000]
    assert f"CUDA {base_cuda}" in section and f"≥ {DRIVER_MIN[base_cuda]}" in section
    assert docker.baseimage in section, "the README names the default base, digest included"


def test_the_gpu_extras_bring_nvdec() -> None:
    pins, problems = load_script("check_lock.py").pins(ROOT / "deploy" / "requirements-gpu.lock")
    assert not problems and "pynvvideocodec" in pins
