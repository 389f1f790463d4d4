"""Configuration: frozen dataclasses, and the one place environment variables are read.

Precedence: explicit arguments (CLI flags, UI widgets) > environment > config file > defaults.
``*_from_env()`` functions are called by entry points, never at import time.

Every variable Chord reads is listed in ``ENV_VARS`` (and, from it, in the README's table) and
read through ``env_value`` — here, and nowhere else. Those read by ``start_service.sh`` and
the Docker files are listed too, marked "launcher".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from chord_core.errors import ConfigError


@dataclass(frozen=True)
class EnvVar:
    name: str
    meaning: str
    used_by: str  # the setting or module it feeds


ENV_VARS = (
    EnvVar("CHORD_MODEL", "hub id, local folder, or `test` / `test-qwen3` (tiny random-weight "
           "checkpoints)", "ModelConfig.model"),
    EnvVar("CHORD_DEVICE", "`auto` (default), `cpu`, `cuda`, `cuda:N`", "ModelConfig.device"),
    EnvVar("CHORD_DTYPE", "`auto` (bf16 on capable GPUs, fp16 on older, fp32 on CPU)",
           "ModelConfig.dtype"),
    EnvVar("CHORD_MAX_MEMORY", "per-GPU memory cap: a fraction (`0.9`: the planner and the "
           "loader) or a size (`20GiB`: the loader only); CPU cap after `,cpu=`",
           "ModelConfig.max_memory, ParallelConfig.max_memory_fraction"),
    EnvVar("CHORD_STRATEGY", "`auto` (one GPU per model when it fits), `replicate`, `shard`",
           "ModelConfig.strategy, ParallelConfig.strategy"),
    EnvVar("CHORD_ALLOW_OFFLOAD", "`1` lets weights spill to CPU/disk when GPUs are present",
           "ModelConfig.allow_offload"),
    EnvVar("CHORD_DECODER", "`fast` (default: static cache + CUDA graphs) or `generate`",
           "ModelConfig.decoder"),
    EnvVar("CHORD_COMPILE", "`0`/`1`: torch.compile the fast decode step (default: on GPUs; "
           "not for one-shot long-video commands)", "ModelConfig.compile"),
    EnvVar("CHORD_FP8", "`1`: the language model's prefill products in FP8 (model/fp8.py; "
           "H100/H200-class GPUs; changes answers; off by default)", "ModelConfig.fp8"),
    EnvVar("CHORD_FUSE", "`0`/`1`: the prefill's RMSNorms and SiLU-gated MLP activations as "
           "fused kernels through torch.compile (model/fused.py; default: on GPUs where the "
           "decode step is compiled, so not for one-shot commands)", "ModelConfig.fuse"),
    EnvVar("CHORD_ONE_ROW_GRAPHS", "`0`: a lone request decodes in the 2-row graph instead of "
           "batch 1's own, tuned one (no tuning to compile on an empty cache; ≈ 5 % slower at "
           "batch 1). Default on; one-shot long-video commands set `0`", "model/fastgen.py"),
    EnvVar("CHORD_CACHE_DIR", "test checkpoints, compile caches, previews (~/.cache/chord)",
           "default_cache_dir"),
    EnvVar("CHORD_DATA_DIR", "job store, uploads, exports (./data)", "default_data_dir"),
    EnvVar("CHORD_MEDIA_ROOTS", "folders a typed path may read (`,`-separated; `off`: none)",
           "media/roots.py"),
    EnvVar("CHORD_MAX_IMAGE_PIXELS", "most pixels one input image may hold (16777216 = "
           "4096×4096)", "media/images.py"),
    EnvVar("CHORD_MAX_REQUEST_PIXELS", "most pixels all images of one service request may "
           "hold (67108864)", "media/images.py"),
    EnvVar("CHORD_GPUS", "CUDA ordinals the workers use (`0,1`)", "ParallelConfig.gpus"),
    EnvVar("CHORD_NUM_GPUS", "how many GPUs the workers use (a number or `all`)",
           "ParallelConfig.num_gpus"),
    EnvVar("CHORD_BATCH_SIZE", "clips or frames per model call, per GPU",
           "ParallelConfig.batch_size_per_gpu"),
    EnvVar("CHORD_CPU_WORKERS", "worker processes where no GPU is available",
           "ParallelConfig.cpu_workers"),
    EnvVar("CHORD_GPU_WEIGHTS", "load-balancer share per GPU (`0:1.0,1:0.8`)",
           "ParallelConfig.gpu_weights"),
    EnvVar("CHORD_EXECUTOR", "where the app's workers run: `local` processes (default) or "
           "`ray`", "chord_ui/resources.py"),
    EnvVar("CHORD_RAY_ADDRESS", "the Ray cluster the app's workers join (`auto`: the one this "
           "machine joined with `ray start`; or HOST:PORT)", "chord_ui/resources.py"),
    EnvVar("CHORD_PARALLEL_CONFIG", "the multi-GPU YAML the app reads (multigpu_config.yaml)",
           "chord_ui/resources.py"),
    EnvVar("CHORD_DETERMINISTIC", "`1`: deterministic kernels in workers (bit-identical "
           "replicas, slightly slower)", "workers"),
    EnvVar("CHORD_WARMUP", "workers' warm-up: `auto` (GPU workers warm up before ready, CPU "
           "workers do not), `full`, `lazy` (ready after loading; the warm-up runs between "
           "requests) or `off` (`serve --warmup`)", "workers"),
    EnvVar("CHORD_WARMUP_TASKS", "tasks workers warm up for: `describe,ground,entail` (default "
           "all); one left out captures on its first request (`serve --warmup-tasks`)", "workers"),
    EnvVar("CHORD_READ_AHEAD", "`0`: workers do not read the next tasks' frames while the "
           "model runs (default on)", "workers"),
    EnvVar("CHORD_READER", "frame reader: `auto` (default: NVDEC, then the CPU decode pool, "
           "then the default reader), `nvdec`, `cpu-pool`, `default`", "media.reader_settings"),
    EnvVar("CHORD_DECODE_PROCS", "CPU decode processes of the `cpu-pool` reader (default: the "
           "usable cores, at most 8)", "media.reader_settings"),
    EnvVar("CHORD_NVDEC_DECODERS", "NVDEC sessions per file on a GPU (4)", "media.nvdec"),
    EnvVar("CHORD_NVDEC_STREAM", "`0`: NVDEC sessions on the default CUDA stream, where reads "
           "wait behind the model's work (default: a stream of their own)", "media.nvdec"),
    EnvVar("CHORD_DECODE", "`exact` (default) or `fast`: the `cpu-pool` reader skips B-frames "
           "not sampled and H.264's loop filter (≈ 0.6× the CPU; frames ≈ 0.65/255 off)",
           "media.reader_settings"),
    EnvVar("CHORD_LONG_VIDEO_S", "clips longer than this many seconds get long-video mode "
           "(600)", "LongVideoSettings.threshold_s"),
    EnvVar("CHORD_LONG_CHUNK_S", "target chunk length of long-video mode, seconds",
           "LongVideoSettings.chunk_s"),
    EnvVar("CHORD_LONG_CHAPTER_S", "about one chapter per this many seconds in long-video "
           "mode (300)", "LongVideoSettings.chapter_s"),
    EnvVar("CHORD_WATCH", "folders the app and `serve` watch: `DIR[|TASK[|QUERY]]`, "
           "`;`-separated (each new clip analysed once)", "library/background.py"),
    EnvVar("CHORD_WATCH_CHECKS", "statements checked on every watched clip, `;`-separated "
           "(alerts)", "library/background.py"),
    EnvVar("CHORD_WATCH_THRESHOLD", "P(entailment) at which a moment becomes an alert (0.8)",
           "library/background.py"),
    EnvVar("CHORD_WATCH_HOOK", "a local command run per alert (the alert as JSON on stdin)",
           "library/background.py"),
    EnvVar("CHORD_LIVE_CHUNK_S", "live streams: seconds per recorded segment and analysed "
           "chunk (10)", "streams/background.py"),
    EnvVar("CHORD_LIVE_MAX_AGE_H", "live streams: recordings older than this many hours are "
           "deleted (168)", "streams/background.py"),
    EnvVar("CHORD_LIVE_MAX_GB", "live streams: each stream's recordings are kept under this "
           "many GB, oldest deleted first (20)", "streams/background.py"),
    EnvVar("CHORD_API_HOST", "address the HTTP service binds (127.0.0.1)", "ServiceSettings"),
    EnvVar("CHORD_API_PORT", "port of the HTTP service (8080)", "ServiceSettings"),
    EnvVar("CHORD_API_KEY", "bearer key the service requires", "ServiceSettings"),
    EnvVar("CHORD_API_NO_AUTH", "`1`: serve without a key off localhost (explicit opt-out)",
           "ServiceSettings"),
    EnvVar("CHORD_API_MAX_BODY_MB", "largest request body the service reads",
           "ServiceSettings"),
    EnvVar("CHORD_API_MAX_TASKS", "most jobs one request may hold", "ServiceSettings"),
    EnvVar("CHORD_API_TIMEOUT_S", "longest a blocking request waits", "ServiceSettings"),
    EnvVar("CHORD_SERVER", "a running Chord service the one-clip commands (describe, ground, "
           "entail) submit to (URL; `local`: always load the model in the CLI's process; "
           "unset: the service `serve` advertises in the data dir, if any)", "cli/remote.py"),
    EnvVar("CHORD_REMOTE_WAIT_S", "longest the one-clip commands follow a service's job "
           "events, in all (3660 s)", "cli/remote_http.py"),
    EnvVar("CHORD_REMOTE_REPLY_S", "longest one reply of a service (headers and body, not "
           "a job's events) may take to arrive whole once asked (120 s)", "cli/remote_http.py"),
    EnvVar("CHORD_API_READERS", "processes that read `/batch_predict` bodies beside the "
           "dispatcher (1 per 4 cores, 1–4; `0`: threads)", "ServiceSettings"),
    EnvVar("CHORD_API_KEY_FILE", "file whose first line is the service's key (not shown by "
           "`ps`, unlike `--api-key`)", "ServiceSettings"),
    EnvVar("CHORD_API_MAX_FRAMES", "most frames one request may ask for (768)",
           "ServiceSettings, service/caps.py"),
    EnvVar("CHORD_API_MAX_PIXELS", "most pixels per frame one request may ask for (1003520)",
           "ServiceSettings, service/caps.py"),
    EnvVar("CHORD_API_MAX_VISUAL_TOKENS", "most visual tokens one request may cost (24000)",
           "ServiceSettings, service/caps.py"),
    EnvVar("CHORD_API_MAX_NEW_TOKENS", "most generated tokens one request may ask for (2048)",
           "ServiceSettings, service/caps.py"),
    EnvVar("CHORD_API_READ_TIMEOUT_S", "seconds a client has to send its headers, and the "
           "longest pause inside a body (10)", "ServiceSettings, service/protocol.py"),
    EnvVar("CHORD_API_BODY_TIMEOUT_S", "seconds a whole request body may take to arrive, "
           "however it is paced (300)", "ServiceSettings, service/protocol.py"),
    EnvVar("CHORD_API_MAX_STREAMS", "event streams (/v1/alerts/events) one key, or one "
           "address without a key, may hold open (1024; more: 429)",
           "ServiceSettings, service/alert_stream.py"),
    EnvVar("CHORD_API_UPLOAD_RETENTION_H", "hours the service keeps files clients sent "
           "(uploads/api) after their jobs finished (24; `0`: keep)",
           "ServiceSettings, service/retention.py"),
    EnvVar("CHORD_ALLOWED_HOSTS", "more Host names the app and the service accept "
           "(DNS-rebinding guard; `,`-separated)", "ServiceSettings, start_service.sh"),
    EnvVar("CHORD_HOST", "address the browser app binds (launcher; localhost)",
           "start_service.sh"),
    EnvVar("CHORD_PORT", "port of the browser app (launcher; 8501)", "start_service.sh"),
    EnvVar("CHORD_CPU_TORCH", "`1`: the launcher installs the CPU build of PyTorch "
           "(`--cpu-torch`)", "start_service.sh"),
    EnvVar("CHORD_APP_GPU", "GPU of the app container (compose.yaml)", "compose.yaml"),
    EnvVar("CHORD_API_GPU", "GPU of the service container (compose.yaml)", "compose.yaml"),
    EnvVar("CHORD_UID", "user id the image runs as (Docker build argument)", "Dockerfile"),
    EnvVar("CHORD_DEBUG", "`1`: the CLI prints tracebacks of internal errors", "__main__"),
    EnvVar("CHORD_FAULT_OOM", "test hook: the first N model calls of a worker raise OOM",
           "Engine.raise_injected_oom"),
    EnvVar("CHORD_FAULT_CRASH_ON", "test hook: a worker dies on clips whose path contains "
           "this text", "runtime/lifeline.py"),
    # standard variables of CUDA and Hugging Face that Chord reads as well
    EnvVar("CUDA_VISIBLE_DEVICES", "GPUs this process may use; workers get a subset",
           "gpus/devices.py, runtime/cluster.py"),
    EnvVar("CUDA_DEVICE_ORDER", "how CUDA numbers GPUs; set to `PCI_BUS_ID` (nvidia-smi's) "
           "when unset", "gpus/devices.py"),
    EnvVar("HF_HUB_OFFLINE", "`1`: never contact the model hub", "model/hub.py"),
    EnvVar("TRANSFORMERS_OFFLINE", "same as HF_HUB_OFFLINE", "model/hub.py"),
    EnvVar("HF_HUB_CACHE", "where downloaded checkpoints live", "model/hub.py"),
    EnvVar("HF_HOME", "Hugging Face's home (its hub cache is under it)", "model/hub.py"),
    EnvVar("HF_ENDPOINT", "hub address (a mirror)", "model/hub.py"),
)
_ENV_NAMES = frozenset(v.name for v in ENV_VARS)


def env_value(name: str, env: Mapping[str, str] | None = None) -> str:
    """Environment variable ``name``, stripped ("" when unset): how Chord reads every one.
    ``env`` replaces ``os.environ`` (tests, a settings dict)."""
    if name not in _ENV_NAMES:
        raise KeyError(f"{name} is not in config.ENV_VARS: add it there (and to the README)")
    value = (os.environ if env is None else env).get(name)
    return (value or "").strip()

def passed_environment(names: Sequence[str]) -> dict[str, str]:
    """The variables ``names`` (not Chord's own settings: e.g. PATH, HOME, LANG) of this
    process's environment, for a child process started with a minimal one (alert hooks)."""
    return {n: os.environ[n] for n in names if n in os.environ and not n.startswith("CHORD_")}


DEFAULT_MODEL = "Qwen/Qwen2.5-VL-3B-Instruct"
TEST_MODEL = "test"
TEST_MODEL_QWEN3 = "test-qwen3"
TEST_MODEL_QWEN3_THINKING = "test-qwen3-thinking"
# model name → the tiny random-weight checkpoint it loads (its family; Qwen3-VL's Thinking
# variant is "qwen3-vl-thinking": testing/checkpoints.py)
TEST_MODELS = {TEST_MODEL: "qwen2.5-vl", TEST_MODEL_QWEN3: "qwen3-vl",
               TEST_MODEL_QWEN3_THINKING: "qwen3-vl-thinking"}

# Qwen2.5-VL geometry: 14 px patches merged 2×2 → one visual token per 28×28 px, and 2
# frames per temporal patch. See shared/design/QWEN_FACTS.md.
PATCH_PX = 28
FRAME_FACTOR = 2
MIN_PIXELS_DEFAULT = 128 * PATCH_PX * PATCH_PX
MAX_PIXELS_DEFAULT = 768 * PATCH_PX * PATCH_PX
TOKEN_BUDGET_DEFAULT = 24_000
MAX_FRAMES_DEFAULT = 768
MIN_FRAMES = 4
# Grounding runs every frame as its own image request: a per-frame token cap keeps each
# request cheap while leaving enough resolution for boxes (≈ 1 MP at most).
GROUND_MAX_PIXELS_DEFAULT = 1280 * PATCH_PX * PATCH_PX
MAX_NEW_TOKENS_RANGE = (128, 2048)  # the app's choices; a request may ask for 1 and up
MAX_NEW_TOKENS_DEFAULT = 512
MAX_QUERY_CHARS = 2_000  # a target or prompt longer than this is refused before loading
# "fast": static KV cache + CUDA-graph decode (fastgen.py); "generate": transformers' own loop.
DECODERS = ("fast", "generate")
# Random-weight checkpoints carry this tag in their README (hub.is_random_weights).
RANDOM_WEIGHTS_TAG = "chord-random-weights"

# How workers use the GPUs (model/planner.py): one replica per GPU group, or one model
# sharded over all of them.
STRATEGIES = ("auto", "replicate", "shard")
# Names users of the original design documents write, mapped to ours.
STRATEGY_ALIASES = {"data_parallel": "replicate", "dp": "replicate", "model_parallel": "shard",
                    "pipeline": "shard", "tensor_parallel": "shard"}



def default_cache_dir() -> Path:
    return Path(env_value("CHORD_CACHE_DIR") or Path.home() / ".cache" / "chord")


def default_data_dir() -> Path:
    return Path(env_value("CHORD_DATA_DIR") or Path.cwd() / "data")


@dataclass(frozen=True)
class SamplingConfig:
    """How frames are chosen and sized. ``fps=None`` means the task's automatic default."""

    fps: float | None = None
    max_frames: int = MAX_FRAMES_DEFAULT
    min_pixels: int = MIN_PIXELS_DEFAULT
    max_pixels: int = MAX_PIXELS_DEFAULT
    token_budget: int = TOKEN_BUDGET_DEFAULT
    ground_max_pixels: int = GROUND_MAX_PIXELS_DEFAULT

    def __post_init__(self) -> None:
        if self.fps is not None and not (0 < self.fps <= 60):
            raise ConfigError(f"sampling fps must be in (0, 60], got {self.fps}",
                              hint="use e.g. --fps 2, or leave it unset for automatic")
        if self.max_frames < MIN_FRAMES:
            raise ConfigError(f"max frames must be at least {MIN_FRAMES}, got {self.max_frames}",
                              hint="use --max-frames 4 or more")
        if not (PATCH_PX * PATCH_PX <= self.min_pixels <= self.max_pixels):
            raise ConfigError(
                f"pixel bounds invalid: min {self.min_pixels} max {self.max_pixels}",
                hint=f"max pixels must be ≥ min pixels ≥ {PATCH_PX * PATCH_PX}")
        if self.token_budget < 64:
            raise ConfigError(f"visual-token budget too small: {self.token_budget}",
                              hint="use at least a few thousand tokens (default 24000)")


@dataclass(frozen=True)
class ModelConfig:
    """Which model to load and where. ``max_memory`` values are a fraction of each GPU's
    memory (``0.9``) or a size string (``"20GiB"``); ``cpu_memory`` caps CPU offload."""

    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    max_memory: str | float | None = None
    cpu_memory: str | None = None
    allow_offload: bool = False
    attn_implementation: str = "sdpa"
    cache_dir: Path | None = None
    batch_size: int = 8
    local_files_only: bool = False
    decoder: str = "fast"
    compile: bool | None = None  # fuse the decode step with torch.compile; None: on GPUs
    fp8: bool = False  # the language model's prefill products in FP8 (model/fp8.py)
    # the prefill's norms and gated activations fused (model/fused.py); None: on GPUs where
    # the decode step is compiled too (``compile`` not False): a long-lived process repays
    # the compile, a one-shot command (``compile=False``) does not
    fuse: bool | None = None
    # Placement of one in-process model (planner.place_engine): "auto" = one GPU when it
    # fits, else the fewest GPUs; "single"; "shard" = every visible GPU.
    strategy: str = "auto"
    device_map: dict | str | None = None  # the user's own device_map, used as given

    def __post_init__(self) -> None:
        if self.decoder not in DECODERS:
            raise ConfigError(f"unknown decoder {self.decoder!r}",
                              hint=f"use one of: {', '.join(DECODERS)}")
        object.__setattr__(self, "strategy", engine_strategy(self.strategy))

    def with_overrides(self, **kwargs: object) -> ModelConfig:
        return replace(self, **{k: v for k, v in kwargs.items() if v is not None})


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _falsy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"0", "false", "no", "off"}


def model_config_from_env(env: Mapping[str, str] | None = None, **overrides: object) -> ModelConfig:
    """ModelConfig from ``CHORD_*`` variables, then explicit ``overrides`` (None = unset)."""
    def get(name: str) -> str:
        return env_value(name, env)

    cfg = ModelConfig(
        model=get("CHORD_MODEL") or DEFAULT_MODEL,
        device=get("CHORD_DEVICE") or "auto",
        dtype=get("CHORD_DTYPE") or "auto",
        max_memory=get("CHORD_MAX_MEMORY") or None,
        allow_offload=_truthy(get("CHORD_ALLOW_OFFLOAD")),
        cache_dir=Path(get("CHORD_CACHE_DIR")) if get("CHORD_CACHE_DIR") else None,
        decoder=get("CHORD_DECODER") or "fast",
        compile=None if not get("CHORD_COMPILE") else _truthy(get("CHORD_COMPILE")),
        fp8=_truthy(get("CHORD_FP8")),
        fuse=None if not get("CHORD_FUSE") else _truthy(get("CHORD_FUSE")),
        strategy=get("CHORD_STRATEGY") or "auto",
    )
    return cfg.with_overrides(**overrides)


def check_max_new_tokens(value: int) -> int:
    lo, hi = 1, MAX_NEW_TOKENS_RANGE[1]  # short answers too (the API's max_tokens: 16)
    if not (lo <= value <= hi):
        raise ConfigError(f"max new tokens must be between {lo} and {hi}, got {value}",
                          hint=f"use --max-new-tokens {MAX_NEW_TOKENS_DEFAULT} (default)")
    return value


def injected_oom_faults(env: Mapping[str, str] | None = None) -> int:
    """``CHORD_FAULT_OOM=N``: the first N model calls of a worker raise CUDA out-of-memory.
    A fault-injection hook for tests of the degradation path; unset (0) in normal use."""
    raw = env_value("CHORD_FAULT_OOM", env)
    try:
        return max(0, int(raw or 0))
    except ValueError as exc:
        raise ConfigError(f"CHORD_FAULT_OOM must be an integer, got {raw!r}",
                          hint="unset it; it is a test hook") from exc


def injected_crash_on(env: Mapping[str, str] | None = None) -> str:
    """``CHORD_FAULT_CRASH_ON=<text>``: a worker handed a clip whose path contains ``text``
    dies on the spot. A fault-injection hook for tests of crash handling; unset in normal use."""
    return env_value("CHORD_FAULT_CRASH_ON", env)


def deterministic_mode(env: Mapping[str, str] | None = None) -> bool:
    """``CHORD_DETERMINISTIC=1``: workers ask torch/cuBLAS for deterministic kernels, so
    replicas and re-runs give bit-identical greedy outputs (slightly slower)."""
    return _truthy(env_value("CHORD_DETERMINISTIC", env))


def one_row_graphs(env: Mapping[str, str] | None = None) -> bool:
    """``CHORD_ONE_ROW_GRAPHS``: batch 1 decodes in graphs of its own (default); ``0``: in
    the 2-row graph (see ``fastgen.FastDecoder.min_rows``)."""
    return not _falsy(env_value("CHORD_ONE_ROW_GRAPHS", env))


def nvdec_own_stream(env: Mapping[str, str] | None = None) -> bool:
    """NVDEC sessions decode on a CUDA stream of their own (default); ``CHORD_NVDEC_STREAM=0``
    keeps PyNvVideoCodec's default stream (a comparison, or a driver that misbehaves)."""
    return not _falsy(env_value("CHORD_NVDEC_STREAM", env))


def read_ahead_mode(env: Mapping[str, str] | None = None) -> bool:
    """Workers read the frames of the tasks queued behind the one they run (default);
    ``CHORD_READ_AHEAD=0`` turns it off (a host short of memory, or a comparison)."""
    return not _falsy(env_value("CHORD_READ_AHEAD", env))


WARMUP_MODES = ("auto", "full", "lazy", "off")


def warmup_mode(env: Mapping[str, str] | None = None) -> str:
    """How workers warm up (``CHORD_WARMUP``, ``serve --warmup``): one of WARMUP_MODES."""
    mode = (env_value("CHORD_WARMUP", env) or "auto").strip().lower()
    if mode not in WARMUP_MODES:
        raise ConfigError(f"CHORD_WARMUP must be one of {', '.join(WARMUP_MODES)}, got "
                          f"{mode!r}", hint="unset it for the default (auto)")
    return mode


def normalise_strategy(name: str) -> str:
    key = (name or "auto").strip().lower()
    key = STRATEGY_ALIASES.get(key, key)
    if key not in STRATEGIES:
        raise ConfigError(f"unknown parallel strategy {name!r}",
                          hint="use auto, replicate (data_parallel) or shard")
    return key


def engine_strategy(name: str | None) -> str:
    """A single engine's strategy: ``auto``, ``single`` (one GPU) or ``shard``. The workers'
    names are accepted: ``replicate`` (and its aliases) means one GPU here."""
    key = (name or "auto").strip().lower()
    if key in ("single", "one", "single_gpu"):
        return "single"
    return {"replicate": "single"}.get(normalise_strategy(key), normalise_strategy(key))
