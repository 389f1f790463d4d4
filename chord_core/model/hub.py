"""Where model weights come from: the tiny test model, a local folder, or the Hugging Face hub.

``resolve_model`` turns ``ModelConfig.model`` into a local folder or fails with a
``ModelNotFoundError`` that says exactly how to get the weights onto an offline machine.
Hub access always fails fast: offline mode (``HF_HUB_OFFLINE=1``) is respected, and the one
network probe runs with a short timeout in a daemon thread, so a dead DNS never hangs a caller.

``model_availability`` (cheap, local only) and ``download_model`` (with byte progress) are what
the UI uses to show a model's state and fetch it.

Hub models live in the Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME``, read at call time);
``cache_dir`` arguments here override that cache. The tiny test model lives in Chord's cache.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from chord_core.config import (
    RANDOM_WEIGHTS_TAG,
    TEST_MODELS,
    ModelConfig,
    default_cache_dir,
    env_value,
)
from chord_core.errors import ModelNotFoundError

log = logging.getLogger(__name__)

HUB_TIMEOUT_S = 5.0
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class ResolvedModel:
    """What ``from_pretrained`` gets (``path_or_id``) and where the files are."""

    path_or_id: str
    is_test: bool
    local_path: Path | None


@dataclass(frozen=True)
class Availability:
    """Whether a model can be loaded now without the network, for the UI."""

    available: bool
    local_path: str | None
    size_bytes: int | None
    message: str


def is_hub_id(model: str) -> bool:
    """``owner/name`` that is not a path someone meant locally (``./x``, ``/x``, ``~/x``)."""
    return bool(_HUB_ID.match(model)) and ".." not in model


def hub_offline() -> bool:
    """Offline mode, read from the environment at call time (not at import)."""
    values = (env_value("HF_HUB_OFFLINE"), env_value("TRANSFORMERS_OFFLINE"))
    return any((v or "").strip().lower() in {"1", "true", "yes", "on"} for v in values)


def how_to_get(repo_id: str) -> str:
    """The hint for a missing hub model on a machine that cannot download it."""
    name = repo_id.split("/")[-1]
    return (f"on a machine with internet access run `hf download {repo_id} --local-dir "
            f"/path/to/{name}` (the `hf` command comes with `pip install -U huggingface_hub`), "
            f"copy the folder to this machine, then pass `--model /path/to/{name}` or set "
            f"CHORD_MODEL=/path/to/{name}. If you copied a Hugging Face cache instead "
            f"(`hf download {repo_id}`), set HF_HUB_OFFLINE=1 so it is used without the hub")


def missing_files(folder: Path) -> list[str]:
    """Files a loadable checkpoint folder lacks (empty list = complete)."""
    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        missing += [s for s in shards if not (folder / s).is_file()]
    elif not any(p.is_file() for p in folder.glob("*.safetensors")):
        missing.append("*.safetensors (model weights)")
    return missing


def weights_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors") if p.is_file())


def is_random_weights(folder: Path) -> bool:
    """True for checkpoints built by ``chord_core.testing.tiny_model`` (any shape)."""
    readme = folder / "README.md"
    return readme.is_file() and RANDOM_WEIGHTS_TAG in readme.read_text(errors="replace")


def check_local_folder(folder: Path) -> Path:
    """``folder`` if it holds a loadable checkpoint, else ModelNotFoundError naming what is
    missing."""
    if not folder.is_dir():
        raise ModelNotFoundError(f"model folder not found: {folder}",
                                 hint="check the path, or pass a hub id such as "
                                      "Qwen/Qwen2.5-VL-3B-Instruct")
    missing = missing_files(folder)
    if missing:
        raise ModelNotFoundError(
            f"model folder {folder} is incomplete: missing {', '.join(missing)}",
            hint="copy the whole model repository (config.json, *.safetensors, tokenizer and "
                 "processor files), e.g. with `hf download <repo> --local-dir <folder>`")
    return folder


def _hf_cache(cache_dir: str | Path | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    if env_value("HF_HUB_CACHE"):
        return Path(env_value("HF_HUB_CACHE"))
    home = env_value("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def local_snapshot(repo_id: str, cache_dir: str | Path | None = None) -> Path | None:
    """The cached snapshot folder of ``repo_id`` (possibly incomplete), or None. No network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = snapshot_download(repo_id, cache_dir=str(_hf_cache(cache_dir)),
                                 local_files_only=True, allow_patterns=ALLOW_PATTERNS)
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError) as exc:
        log.debug("%s not in the local cache: %s", repo_id, exc)
        return None
    return Path(path)


def config_file(model: str) -> Path | None:
    """The ``config.json`` loading ``model`` would read, when it is on this machine already:
    the test model's folder, a local folder, or the hub cache's snapshot (``refs/main``).
    Plain file look-ups — no network, no huggingface_hub import — for a worker that wants to
    know the family before transformers is imported (``preimport``, ``prefetch_weights``)."""
    if model in TEST_MODELS:
        from chord_core.testing.checkpoints import family_builder

        folder = default_cache_dir() / "models" / family_builder(TEST_MODELS[model])[0]
    elif Path(model).expanduser().is_dir() or not is_hub_id(model):
        folder = Path(model).expanduser()
    else:
        repo = _hf_cache(None) / ("models--" + model.replace("/", "--"))
        try:
            folder = repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
        except OSError:
            return None
    path = folder / "config.json"
    return path if path.is_file() else None


def _endpoint() -> str:
    from huggingface_hub import constants

    return env_value("HF_ENDPOINT") or constants.ENDPOINT


def _with_timeout(fn: Callable[[], Any], timeout: float) -> Any:
    """Run ``fn`` in a daemon thread; TimeoutError if it does not finish in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, name="chord-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer from {_endpoint()} within {timeout:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def hub_model_info(repo_id: str, timeout: float = HUB_TIMEOUT_S) -> Any:
    """``HfApi.model_info`` with file sizes, or ModelNotFoundError (unreachable, unknown,
    gated) carrying the how-to-get hint. Never waits longer than ``timeout``."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if hub_offline():
        raise ModelNotFoundError(f"{repo_id} is not in the local cache and HF_HUB_OFFLINE is set",
                                 hint=how_to_get(repo_id))
    api = HfApi(endpoint=_endpoint())
    try:
        return _with_timeout(lambda: api.model_info(repo_id, files_metadata=True,
                                                    timeout=timeout), timeout + 1.0)
    except GatedRepoError as exc:
        raise ModelNotFoundError(f"{repo_id} is gated on the hub: {exc}",
                                 hint="accept its licence on huggingface.co and log in with "
                                      "`hf auth login`") from exc
    except RepositoryNotFoundError as exc:
        raise ModelNotFoundError(f"no model named {repo_id} on the hub",
                                 hint="check the spelling, e.g. Qwen/Qwen2.5-VL-3B-Instruct"
                                 ) from exc
    except Exception as exc:  # network errors differ between httpx/requests versions
        raise ModelNotFoundError(
            f"{repo_id} is not downloaded and the hub is unreachable ({type(exc).__name__}: "
            f"{exc})", hint=how_to_get(repo_id)) from exc


def resolve_model(cfg: ModelConfig) -> ResolvedModel:
    """Find the weights for ``cfg.model``: test model, local folder, cached or downloaded hub
    repo. Raises ModelNotFoundError with a concrete fix when they cannot be had."""
    if cfg.model in TEST_MODELS:
        from chord_core.testing.checkpoints import ensure_test_model

        path = ensure_test_model(cfg.cache_dir, TEST_MODELS[cfg.model])
        return ResolvedModel(str(path), True, path)
    folder = Path(cfg.model).expanduser()
    if folder.is_dir() or not is_hub_id(cfg.model):
        check_local_folder(folder)
        return ResolvedModel(str(folder), is_random_weights(folder), folder)
    snapshot = local_snapshot(cfg.model)
    if snapshot is not None and not missing_files(snapshot):
        return ResolvedModel(cfg.model, is_random_weights(snapshot), snapshot)
    if cfg.local_files_only:
        raise ModelNotFoundError(f"{cfg.model} is not in the local Hugging Face cache",
                                 hint=how_to_get(cfg.model))
    hub_model_info(cfg.model)  # fails fast with the hint when offline/unreachable/unknown
    path = download_model(cfg.model)
    return ResolvedModel(cfg.model, False, path)


def model_availability(model: str, cache_dir: str | Path | None = None) -> Availability:
    """Can ``model`` be loaded right now without the network? Local checks only."""
    if model in TEST_MODELS:
        from chord_core.testing.checkpoints import family_builder
        from chord_core.testing.tiny_model import TEST_MODEL_LABEL

        path = default_cache_dir() / "models" / family_builder(TEST_MODELS[model])[0]
        return Availability(True, str(path), weights_size(path) if path.is_dir() else None,
                            f"{TEST_MODEL_LABEL} (built locally on first use)")
    folder = Path(model).expanduser()
    if folder.is_dir() or not is_hub_id(model):
        if not folder.is_dir():
            return Availability(False, None, None, f"folder not found: {folder}")
        missing = missing_files(folder)
        if missing:
            return Availability(False, str(folder), None,
                                f"incomplete: missing {', '.join(missing)}")
        return Availability(True, str(folder), weights_size(folder), "local folder")
    snapshot = local_snapshot(model, cache_dir)
    if snapshot is None:
        return Availability(False, None, None, f"not downloaded; {how_to_get(model)}")
    missing = missing_files(snapshot)
    if missing:
        return Availability(False, str(snapshot), weights_size(snapshot),
                            f"partly downloaded: missing {', '.join(missing)}")
    return Availability(True, str(snapshot), weights_size(snapshot), "in the Hugging Face cache")


def _repo_bytes(info: Any) -> int:
    """Total size of the files ``download_model`` fetches (0 when the hub gave no sizes)."""
    files = [s for s in (getattr(info, "siblings", None) or [])
             if any(fnmatch.fnmatch(s.rfilename, p) for p in ALLOW_PATTERNS)]
    return sum(int(getattr(s, "size", 0) or 0) for s in files)


class _BlobPoller:
    """Reports bytes present in the repo's cache blob folder while a download runs.

    Watching the disk works the same on every huggingface_hub version (its progress bars
    differ between 1.x and 2.x)."""

    def __init__(self, blobs: Path, total: int, on_progress: ProgressCallback) -> None:
        self.blobs, self.total, self.on_progress = blobs, total, on_progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chord-download-progress",
                                        daemon=True)

    def _done(self) -> int:
        if not self.blobs.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.blobs.iterdir() if p.is_file())

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.on_progress(min(self._done(), self.total or self._done()), self.total)

    def __enter__(self) -> _BlobPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)


def download_model(repo_id: str, *, on_progress: ProgressCallback | None = None,
                   cache_dir: str | Path | None = None) -> Path:
    """Download the files Chord needs from ``repo_id`` into the HF cache; returns the snapshot
    folder. ``on_progress(done_bytes, total_bytes)`` is called about twice a second."""
    from huggingface_hub import snapshot_download

    info = hub_model_info(repo_id)
    total = _repo_bytes(info)
    cache = _hf_cache(cache_dir)
    blobs = cache / f"models--{repo_id.replace('/', '--')}" / "blobs"
    log.info("downloading %s (%.2f GB) into %s", repo_id, total / 1e9, cache)
    t0 = time.perf_counter()
    try:
        if on_progress is None:
            path = snapshot_download(repo_id, cache_dir=str(cache), allow_patterns=ALLOW_PATTERNS,
                                     endpoint=_endpoint(), etag_timeout=HUB_TIMEOUT_S)
        else:
            with _BlobPoller(blobs, total, on_progress):
                path = snapshot_download(repo_id, cache_dir=str(cache),
                                         allow_patterns=ALLOW_PATTERNS, endpoint=_endpoint(),
                                         etag_timeout=HUB_TIMEOUT_S)
    except Exception as exc:  # network/disk errors differ between hub versions
        raise ModelNotFoundError(f"downloading {repo_id} failed ({type(exc).__name__}: {exc})",
                                 hint="check free disk space and the network, then retry; "
                                      + how_to_get(repo_id)) from exc
    if on_progress is not None:
        on_progress(total, total)
    folder = check_local_folder(Path(path))
    log.info("downloaded %s in %.0f s", repo_id, time.perf_counter() - t0)
    return folder
