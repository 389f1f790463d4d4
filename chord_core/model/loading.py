"""Qwen2.5-VL through transformers: load it where it fits, and run describe / ground requests.

    resolve (hub.py) ─▶ dtype + device map (placement.py) ─▶ from_pretrained + AutoProcessor
    frames + metadata ─▶ processor (no resampling, no resizing) ─▶ generate ─▶ new tokens → text

Rules that keep results right (see shared/design/QWEN_FACTS.md):

* Video frames are sampled by Chord and passed WITH ``video_metadata`` and
  ``do_sample_frames=False``; otherwise the processor assumes 24 fps and the model's time axis
  (``second_per_grid_ts``) is wrong.
* Frames/images arrive already resized to the plan's ``input_wh``; the processor's pixel
  bounds are set so it does not resize them again, and ``input_wh`` reported back is read
  from the processor's grid (what the model really saw).
* The WHOLE processor output goes to ``generate`` (``mm_token_type_ids`` is needed for the
  3-D rotary positions). Greedy decoding; only new tokens are decoded.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from chord_core.config import ModelConfig
from chord_core import families
from chord_core.errors import ConfigError, InputError, JobCancelled, ModelError, ResourceError
from chord_core.model.hub import (
    ResolvedModel,
    resolve_model,
)
from chord_core.model.placement import check_placement, choose_dtype, parse_max_memory
from chord_core.model.prompts import describe_messages, ground_messages
from chord_core.types import ModelInfo

if TYPE_CHECKING:
    import numpy as np

__all__ = ["GenerationOutput", "GroundOutput", "LoadedModel", "build_image_inputs",
           "build_video_inputs", "describe", "ground_images", "load_model", "release_memory"]

log = logging.getLogger(__name__)

MIN_SIDE_PX = 28


@dataclass
class LoadedModel:
    """A model ready to generate. Lives in one process; never crosses a process boundary."""

    model: Any
    processor: Any
    info: ModelInfo
    family: str
    coord_mode: str
    load_s: float
    input_device: str
    resolved: ResolvedModel | None = None
    decoder: Any = None  # fastgen.FastDecoder, or None: transformers' generate decodes
    phases: dict[str, float] = field(default_factory=dict)  # seconds per loading step
    placement: str = ""  # why the model sits where it does (Chord's placement), for plans
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Laps:
    """Seconds per step, each step timed from the end of the one before (start-up reports)."""

    def __init__(self) -> None:
        self.t0 = self._mark = time.perf_counter()
        self.steps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name], self._mark = now - self._mark, now

    def total(self) -> float:
        return time.perf_counter() - self.t0


@dataclass(frozen=True)
class GenerationOutput:
    """One describe request: text plus what it cost."""

    text: str
    prompt_tokens: int
    new_tokens: int
    preprocess_s: float
    generate_s: float


@dataclass(frozen=True)
class GroundOutput:
    """One grounded image: raw model text and the size the model saw (boxes are in it).
    Times are this image's share of its batch."""

    text: str
    input_wh: tuple[int, int]
    prompt_tokens: int = 0
    new_tokens: int = 0
    preprocess_s: float = 0.0
    generate_s: float = 0.0


# -- loading --------------------------------------------------------------------------------
def _model_class(name: str) -> tuple[str, str, Any]:
    """(family, box convention, transformers class) of a config.json ``model_type``."""
    import transformers

    row = families.model_type(name)
    class_name = row.class_name
    cls = getattr(transformers, class_name, None)
    if cls is None:
        raise ModelError(f"transformers {transformers.__version__} has no {class_name}",
                         hint="upgrade transformers (pip install -U 'transformers>=5.17')")
    return row.family, families.family(row.family).coords, cls


def _gpu_totals() -> dict[int, int]:
    import torch

    if not torch.cuda.is_available():
        return {}
    return {i: torch.cuda.get_device_properties(i).total_memory
            for i in range(torch.cuda.device_count())}


# device_map marker: Chord places the model itself (planner.place_engine) once it knows its size
PLACE = "<chord-placement>"
_ACCELERATE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def _device_plan(cfg: ModelConfig) -> tuple[str, Any, dict | None]:
    """(device kind, device_map for from_pretrained or ``PLACE``, max_memory) from ``cfg``."""
    import torch

    device = (cfg.device or "auto").strip().lower()
    if device not in ("auto", "cpu", "cuda") and not (
            device.startswith("cuda:") and device[5:].isdigit()):
        raise ConfigError(f"unknown device {cfg.device!r}", hint="use auto, cpu, cuda or cuda:N")
    cuda = torch.cuda.is_available()
    if device == "cpu" or (device == "auto" and not cuda):
        return "cpu", {"": "cpu"}, None
    if not cuda:
        raise ConfigError(f"device {cfg.device!r} asked for CUDA, but no GPU is visible",
                          hint="use --device cpu, or check the driver / CUDA_VISIBLE_DEVICES")
    if device in ("auto", "cuda"):
        caps = parse_max_memory(cfg.max_memory, _gpu_totals(), cfg.cpu_memory)
        return "cuda", _explicit_map(cfg.device_map), caps
    if int(device[5:]) >= torch.cuda.device_count():
        raise ConfigError(f"{cfg.device} is not visible ({torch.cuda.device_count()} GPUs)",
                          hint="use cuda:0 .. cuda:N-1 or auto")
    return "cuda", {"": device}, None


def _explicit_map(device_map: Any) -> Any:
    """The user's own ``device_map``: a dict or one of accelerate's strategies is used as given
    (``"auto"`` here means what it means in transformers: spread over every visible GPU);
    None means Chord places the model."""
    if device_map is None:
        return PLACE
    if isinstance(device_map, Mapping):
        return {str(k): v for k, v in device_map.items()}
    if isinstance(device_map, str) and device_map.strip().lower() in _ACCELERATE_MAPS:
        return device_map.strip().lower()
    raise ConfigError(f"unsupported device_map {device_map!r}",
                      hint=f"use a dict, one of {', '.join(_ACCELERATE_MAPS)}, or leave it out "
                           "to let Chord place the model")


def _meta_model(cls: Any, config: Any, dtype: Any) -> Any:
    import torch

    with torch.device("meta"):
        return cls._from_config(config, dtype=dtype)


def _place(cfg: ModelConfig, meta_model: Any, caps: dict | None) -> Any:
    """Chord's placement for one engine: the fewest GPUs that hold the model with headroom."""
    from chord_core.gpus.devices import cuda_inventory
    from chord_core.model.planner import place_engine

    weights = sum(p.numel() * p.element_size() for p in meta_model.parameters())
    placement = place_engine(weights, cuda_inventory(), caps, strategy=cfg.strategy)
    log.info("placement: %s", placement.reason)
    return placement


def _planned_device_map(meta_model: Any, device_map: Any, max_memory: dict | None
                        ) -> tuple[Any, dict[str, int]]:
    """The map ``device_map`` (a strategy string) would produce, computed on the weightless
    model so the offload check runs before any weight is read, plus the bytes of each
    offloaded module. Falls back to the string if this transformers version lacks the helper
    (the check then runs after loading)."""
    try:
        from transformers.integrations.accelerate import _get_device_map
    except ImportError:
        return device_map, {}
    try:
        planned = dict(_get_device_map(meta_model, device_map, max_memory, None))
    except TypeError as exc:  # private helper: its signature may change between versions
        log.warning("cannot plan the device map before loading (%s); checking after", exc)
        return device_map, {}
    offloaded = {}
    for name, dev in planned.items():
        if str(dev) in ("cpu", "disk"):
            params = meta_model.get_submodule(name).parameters()
            offloaded[name] = sum(p.numel() * p.element_size() for p in params)
    return planned, offloaded


def _device_name(dev: Any) -> str:
    return f"cuda:{dev}" if isinstance(dev, int) else str(dev)


def _input_device(model: Any) -> str:
    return str(model.get_input_embeddings().weight.device)


def _load_weights(cls: Any, path: str, **kwargs: Any) -> Any:
    """``from_pretrained`` with its failures turned into errors that say what to do."""
    import torch
    from safetensors import SafetensorError

    try:
        return cls.from_pretrained(path, use_safetensors=True, trust_remote_code=False,
                                   **kwargs)
    except torch.cuda.OutOfMemoryError as exc:
        raise ResourceError(f"out of GPU memory while loading {path}",
                            hint="use a smaller model, lower --max-memory for other "
                                 "processes, or free the GPU") from exc
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise ModelError(f"could not load the weights in {path}: {exc}",
                         hint="the files may be corrupt or incomplete; download the model "
                              "again (`hf download <repo> --local-dir <folder>`)") from exc


def _load_config(path: str) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{path} has no usable config.json: {exc}",
                         hint="point --model at a Qwen2.5-VL / Qwen3-VL model folder or hub "
                              "id") from exc


def load_model(cfg: ModelConfig) -> LoadedModel:
    """Resolve, place and load the model and its processor. Raises ChordError subclasses."""
    laps = Laps()
    lap = laps.lap

    import torch
    from transformers import AutoProcessor

    from chord_core.model import fastgen
    lap("imports_s")
    resolved = resolve_model(cfg)
    path = str(resolved.local_path or resolved.path_or_id)
    config = _load_config(path)
    family, coord_mode, cls = _model_class(getattr(config, "model_type", ""))
    kind, device_map, max_memory = _device_plan(cfg)
    bf16 = kind == "cuda" and all(torch.cuda.get_device_capability(i)[0] >= 8
                                  for i in range(torch.cuda.device_count()))
    dtype = getattr(torch, choose_dtype(kind, bf16, cfg.dtype))
    placement = ""
    if device_map == PLACE or isinstance(device_map, str):
        meta = _meta_model(cls, config, dtype)
        if device_map == PLACE:
            placed = _place(cfg, meta, max_memory)
            device_map, max_memory, placement = placed.device_map, placed.max_memory, \
                placed.reason
        if isinstance(device_map, str):
            device_map, offloaded_bytes = _planned_device_map(meta, device_map, max_memory)
            if isinstance(device_map, dict):
                check_placement(device_map, True, cfg.allow_offload, offloaded_bytes)
        del meta
    lap("plan_s")
    log.info("loading %s (%s) as %s, device_map=%s", cfg.model, family, dtype,
             device_map if not isinstance(device_map, dict) or len(device_map) < 4 else
             sorted({str(v) for v in device_map.values()}))
    model = _load_weights(cls, path, dtype=dtype, device_map=device_map, max_memory=max_memory,
                          attn_implementation=cfg.attn_implementation)
    lap("weights_s")
    hf_map = dict(getattr(model, "hf_device_map", None) or {"": _input_device(model)})
    check_placement(hf_map, kind == "cuda", cfg.allow_offload)
    model.eval()
    processor = AutoProcessor.from_pretrained(path, trust_remote_code=False)
    processor.tokenizer.padding_side = "left"
    lap("processor_s")
    info = ModelInfo(id=cfg.model, dtype=str(dtype).replace("torch.", ""),
                     device_map={k: _device_name(v) for k, v in hf_map.items()},
                     test_model=resolved.is_test, family=family, coords=coord_mode)
    decoder = fastgen.for_model(cfg, model, processor)
    lap("fast_path_s")
    return LoadedModel(model=model, processor=processor, info=info, family=family,
                       decoder=decoder, coord_mode=coord_mode, load_s=laps.total(),
                       input_device=_input_device(model), resolved=resolved, phases=laps.steps,
                       placement=placement or _placement_line(info.device_map, cfg))


def _placement_line(device_map: Mapping[str, str], cfg: ModelConfig) -> str:
    devices = ", ".join(sorted(set(device_map.values())))
    if devices == "cpu" and (cfg.device or "auto").strip().lower() == "auto":
        return "on the CPU (no GPU visible)"
    return f"on {devices} (as --device / device_map asked)"


def release_memory() -> None:
    """Return freed memory to the system / CUDA driver after a model is dropped."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


# -- inputs ---------------------------------------------------------------------------------
def _check_frames(frames: Any, ndim: int, what: str) -> tuple[int, int]:
    import numpy as np

    if not isinstance(frames, np.ndarray) or frames.ndim != ndim or frames.shape[-1] != 3:
        shape = getattr(frames, "shape", None)
        raise InputError(f"{what} must be a uint8 RGB array with {ndim} dims (..., 3), got "
                         f"{type(frames).__name__} {shape}",
                         hint="pass frames from video.read_frames")
    if frames.dtype != np.uint8:
        raise InputError(f"{what} must be uint8, got {frames.dtype}", hint="convert to uint8 RGB")
    h, w = frames.shape[-3], frames.shape[-2]
    if min(h, w) < MIN_SIDE_PX:
        raise InputError(f"{what} is {w}×{h}, smaller than {MIN_SIDE_PX} px on a side",
                         hint="sample at a larger size (multiples of 28)")
    return h, w


def _no_resize_kwargs(processor_part: Any, sizes: Sequence[tuple[int, int]],
                      frames: Sequence[int] = ()) -> dict[str, Any]:
    """Pixel bounds that keep inputs at their size. Sizes that are multiples of the model's
    token side (patch × merge: 28 px for Qwen2.5-VL) stay as they are; Qwen3-VL (32 px) rounds
    them to its own multiple, keeping the aspect — never a further down- or up-scale.
    Qwen3-VL's video processor bounds pixels summed over the frames (``frames`` per clip)."""
    side = _patch_px(processor_part) * int(getattr(processor_part, "merge_size", 2))
    areas = [max(side, round(h / side) * side) * max(side, round(w / side) * side)
             for h, w in sizes]
    if frames and _video_bounds_are_totals(processor_part):
        tp = int(getattr(processor_part, "temporal_patch_size", 2))
        totals = [a * max(tp, -(-t // tp) * tp) for a, t in zip(areas, frames)]
        kwargs: dict[str, Any] = {"size": {"shortest_edge": side * side * tp,
                                           "longest_edge": max(totals)}}
    else:
        kwargs = {"size": {"shortest_edge": min(areas), "longest_edge": max(areas)}}
    if hasattr(processor_part, "cap_pixels_per_frame"):
        kwargs["cap_pixels_per_frame"] = False  # transformers ≥ 5.2x: no total-video cap
    return kwargs


def _patch_px(processor_part: Any) -> int:
    return int(getattr(processor_part, "patch_size", 14))


def _video_bounds_are_totals(processor_part: Any) -> bool:
    """Qwen3-VL's video processor compares its ``size`` bounds with T×H×W, not H×W."""
    return type(processor_part).__name__.startswith("Qwen3VL")


def _timed_metadata(meta: dict[str, Any], times_s: Sequence[float] | None) -> dict[str, Any]:
    """Metadata whose ``frames_indices / fps`` are the frames' own presentation times.

    Qwen3-VL writes ``<t seconds>`` before every frame pair, computed as index / fps: an
    average fps is wrong on variable-rate clips and clips with timestamp jumps. On a
    millisecond grid (fps 1000, index = round(t × 1000)) the text carries the container's
    times instead. Qwen2.5-VL takes its time axis from fps alone, so it keeps the source's."""
    if not times_s or len(times_s) != len(meta["frames_indices"]):
        return meta
    idx = [int(round(float(t) * 1000)) for t in times_s]
    if any(b <= a for a, b in zip(idx, idx[1:])) or idx[0] < 0:
        return meta  # not increasing on the ms grid: keep the source indices
    return {**meta, "fps": 1000.0, "frames_indices": idx,
            "total_num_frames": max(idx[-1] + 1, int(meta["total_num_frames"]))}


_METADATA_KEYS = ("total_num_frames", "fps", "frames_indices", "duration", "width", "height")


def _video_metadata(metadata: Mapping[str, Any], num_frames: int) -> dict[str, Any]:
    """The source-video metadata the processor needs to place frames in time, checked."""
    missing = {"total_num_frames", "fps", "frames_indices"} - set(metadata)
    if missing:
        raise InputError(f"video metadata lacks {', '.join(sorted(missing))}",
                         hint="build it with video.video_metadata(info, frame_indices)")
    meta = {k: metadata[k] for k in _METADATA_KEYS if metadata.get(k) is not None}
    meta["frames_indices"] = [int(i) for i in meta["frames_indices"]]
    if len(meta["frames_indices"]) != num_frames:
        raise InputError(f"{num_frames} frames but {len(meta['frames_indices'])} frame "
                         "indices in the metadata", hint="pass the indices actually read")
    if not float(meta["fps"]) > 0 or int(meta["total_num_frames"]) < num_frames:
        raise InputError(f"implausible video metadata: fps {meta['fps']}, "
                         f"{meta['total_num_frames']} frames in the source",
                         hint="probe the video again; its header may be broken")
    return meta


def build_video_inputs(lm: LoadedModel, frames: np.ndarray, metadata: Mapping[str, Any],
                       prompt: str) -> Any:
    """Processor output (BatchFeature) for one pre-sampled clip plus ``prompt``.

    ``frames`` is T×H×W×3 uint8 RGB at the plan's input size; ``metadata`` has
    ``total_num_frames``, ``fps`` and ``frames_indices`` of the SOURCE video.
    """
    return build_video_batch(lm, [(frames, metadata, prompt)])


def build_video_batch(lm: LoadedModel, clips: Sequence[tuple[np.ndarray, Mapping[str, Any], str]]
                      ) -> Any:
    """Processor output for several clips (frames, source metadata, prompt), left-padded:
    one row per clip. Clips may differ in frame count, size and prompt."""
    if not clips:
        raise InputError("no clips to describe", hint="pass at least one clip")
    sizes, metas, texts = [], [], []
    processor = lm.processor
    for frames, metadata, prompt in clips:
        h, w = _check_frames(frames, 4, "video frames")
        if len(frames) == 0:
            raise InputError("no video frames to describe", hint="check that the clip decodes")
        sizes.append((h, w))
        meta = _video_metadata(metadata, len(frames))
        if families.family(lm.family).text_timestamps:
            meta = _timed_metadata(meta, metadata.get("timestamps_s"))
        metas.append(meta)
        texts.append(processor.apply_chat_template(describe_messages(prompt), tokenize=False,
                                                   add_generation_prompt=True))
    inputs = processor(text=texts, videos=[c[0] for c in clips], video_metadata=metas,
                       do_sample_frames=False, return_tensors="pt", padding=True,
                       **_no_resize_kwargs(processor.video_processor, sizes,
                                           [len(c[0]) for c in clips]))
    patch = _patch_px(processor.video_processor)
    side = patch * int(getattr(processor.video_processor, "merge_size", 2))
    for (h, w), grid in zip(sizes, inputs["video_grid_thw"].tolist()):
        if abs(grid[1] * patch - h) >= side or abs(grid[2] * patch - w) >= side:
            log.warning("the processor resized video frames from %d×%d to %d×%d", w, h,
                        grid[2] * patch, grid[1] * patch)
    return inputs


def build_image_inputs(lm: LoadedModel, images: Sequence[np.ndarray], target: str) -> Any:
    """Processor output for a batch of grounding requests: one image + prompt per row,
    left-padded."""
    sizes = [_check_frames(img, 3, f"image {i}") for i, img in enumerate(images)]
    processor = lm.processor
    text = processor.apply_chat_template(ground_messages(target, lm.family), tokenize=False,
                                         add_generation_prompt=True)
    return processor(text=[text] * len(images), images=list(images), padding=True,
                     return_tensors="pt",
                     **_no_resize_kwargs(processor.image_processor, sizes))


# -- generation -----------------------------------------------------------------------------
def _stopping(cancel: threading.Event | None) -> list[Any]:
    """A stopping criterion that ends generate() early once ``cancel`` is set."""
    if cancel is None:
        return []
    import torch
    from transformers import StoppingCriteria

    class _Cancel(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), cancel.is_set(), dtype=torch.bool,
                              device=input_ids.device)

    return [_Cancel()]


def _raise_if_cancelled(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise JobCancelled("the analysis was cancelled", hint="run it again when needed")


def _generate(lm: LoadedModel, inputs: Any, max_new_tokens: int, min_new_tokens: int | None,
              cancel: threading.Event | None) -> tuple[Any, float]:
    """Greedy generate on the WHOLE processor output; returns (new token ids, seconds)."""
    import torch
    from transformers import StoppingCriteriaList

    if max_new_tokens < 1:
        raise ConfigError(f"max new tokens must be ≥ 1, got {max_new_tokens}",
                          hint="use e.g. --max-new-tokens 512")
    inputs = inputs.to(lm.input_device)
    tokenizer = lm.processor.tokenizer
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": False,
                              "pad_token_id": tokenizer.pad_token_id,
                              "stopping_criteria": StoppingCriteriaList(_stopping(cancel))}
    if min_new_tokens:
        kwargs["min_new_tokens"] = min(min_new_tokens, max_new_tokens)
    t0 = time.perf_counter()
    with lm.lock, torch.inference_mode():
        if lm.decoder is not None:
            try:
                new = lm.decoder.generate(inputs, max_new_tokens, cancel=cancel,
                                          min_new_tokens=kwargs.get("min_new_tokens", 0))
            except torch.cuda.OutOfMemoryError:
                lm.decoder.clear()  # its buffers are the first thing to give back
                raise
        else:
            new = lm.model.generate(**inputs, **kwargs)[:, inputs["input_ids"].shape[1]:]
        new = new.cpu()  # waits for the GPU: the time below is the real generation time
    seconds = time.perf_counter() - t0
    _raise_if_cancelled(cancel)
    return new, seconds


def _count_new(row: Any, stop_ids: set[int]) -> int:
    """Generated tokens up to and including the first end token (padding after it excluded)."""
    ids = row.tolist()
    for i, tok in enumerate(ids):
        if tok in stop_ids:
            return i + 1
    return len(ids)


def _stop_ids(lm: LoadedModel) -> set[int]:
    eos = lm.model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    pad = lm.processor.tokenizer.pad_token_id
    return ids | ({pad} if pad is not None else set())


def describe(lm: LoadedModel, frames: np.ndarray, metadata: Mapping[str, Any], prompt: str,
             max_new_tokens: int, *, min_new_tokens: int | None = None,
             cancel: threading.Event | None = None) -> GenerationOutput:
    """Describe one clip (its sampled frames + source-video metadata) in free text."""
    return describe_batch(lm, [(frames, metadata, prompt)], max_new_tokens,
                          min_new_tokens=min_new_tokens, cancel=cancel)[0]


def describe_batch(lm: LoadedModel, clips: Sequence[tuple[np.ndarray, Mapping[str, Any], str]],
                   max_new_tokens: int, *, min_new_tokens: int | None = None,
                   cancel: threading.Event | None = None) -> list[GenerationOutput]:
    """Describe several clips in one generate call (one row each, left-padded). Times are
    each clip's share of the batch."""
    _raise_if_cancelled(cancel)
    t0 = time.perf_counter()
    inputs = build_video_batch(lm, clips)
    preprocess_s = time.perf_counter() - t0
    new_ids, generate_s = _generate(lm, inputs, max_new_tokens, min_new_tokens, cancel)
    texts = lm.processor.batch_decode(new_ids, skip_special_tokens=True)
    stop, n = _stop_ids(lm), len(clips)
    return [GenerationOutput(text=text.strip(), prompt_tokens=int(mask.sum()),
                             new_tokens=_count_new(row, stop), preprocess_s=preprocess_s / n,
                             generate_s=generate_s / n)
            for text, mask, row in zip(texts, inputs["attention_mask"], new_ids)]


def _ground_batch(lm: LoadedModel, images: Sequence[np.ndarray], target: str,
                  max_new_tokens: int, min_new_tokens: int | None,
                  cancel: threading.Event | None) -> list[GroundOutput]:
    t0 = time.perf_counter()
    inputs = build_image_inputs(lm, images, target)
    preprocess_s = time.perf_counter() - t0
    new_ids, generate_s = _generate(lm, inputs, max_new_tokens, min_new_tokens, cancel)
    texts = lm.processor.batch_decode(new_ids, skip_special_tokens=True)
    patch = _patch_px(lm.processor.image_processor)
    stop = _stop_ids(lm)
    n = len(images)
    return [GroundOutput(text=text.strip(), input_wh=(int(g[2]) * patch, int(g[1]) * patch),
                         prompt_tokens=int(mask.sum()), new_tokens=_count_new(row, stop),
                         preprocess_s=preprocess_s / n, generate_s=generate_s / n)
            for text, g, mask, row in zip(texts, inputs["image_grid_thw"].tolist(),
                                          inputs["attention_mask"], new_ids)]


def ground_images(lm: LoadedModel, images: Sequence[np.ndarray], target: str, *,
                  batch_size: int = 8, max_new_tokens: int = 256,
                  min_new_tokens: int | None = None,
                  on_batch: Callable[[int, int], None] | None = None,
                  cancel: threading.Event | None = None) -> list[GroundOutput]:
    """Ground ``target`` in each image (one request per image, batched). Returns one output
    per image, in order; ``on_batch(done_images, total_images)`` after each batch."""
    if batch_size < 1:
        raise ConfigError(f"batch size must be ≥ 1, got {batch_size}", hint="use --batch-size 8")
    outputs: list[GroundOutput] = []
    total = len(images)
    for start in range(0, total, batch_size):
        _raise_if_cancelled(cancel)
        batch = images[start:start + batch_size]
        outputs.extend(_ground_batch(lm, batch, target, max_new_tokens, min_new_tokens,
                                     cancel))
        if on_batch is not None:
            on_batch(len(outputs), total)
    return outputs
