"""Qwen2.5-VL / Qwen3-VL through transformers: load it where it fits, and run describe /
ground requests.

    resolve (hub.py) ─▶ dtype (placement.py) + device map (device_map.py)
        ─▶ from_pretrained, with AutoProcessor on a thread beside it (``_load_processor``)
    frames + metadata ─▶ processor inputs (inputs.py) ─▶ generate ─▶ new tokens → text

Rules that keep results right (see shared/design/QWEN_FACTS.md):

* Video frames are sampled by Chord, passed WITH ``video_metadata``, ``do_sample_frames=False``;
  else the processor assumes 24 fps and the model's time axis (``second_per_grid_ts``) is wrong.
* Frames/images arrive resized to the plan's ``input_wh``; the processor's pixel bounds do not
  resize them again; ``input_wh`` reported back is the processor's grid (what the model saw).
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

from chord_core import families
from chord_core.config import ModelConfig
from chord_core.errors import ConfigError, JobCancelled, ModelError, ResourceError
from chord_core.model.device_map import (
    PLACE,
    device_name,
    device_plan,
    input_device,
    meta_model,
    place,
    planned_device_map,
)
from chord_core.model.hub import ResolvedModel, resolve_model
from chord_core.model.inputs import build_image_inputs, build_video_batch, patch_px
from chord_core.model.placement import check_placement, choose_dtype
from chord_core.threads import Pool
from chord_core.types import ModelInfo

if TYPE_CHECKING:
    import numpy as np

__all__ = ["GenerationOutput", "GroundOutput", "LoadedModel", "describe", "describe_batch",
           "ground_images", "load_model", "release_memory"]

log = logging.getLogger(__name__)


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


# transformers' loading switches process-wide state (weight-init and device contexts) on and
# off; two threads loading at once can leave it switched, and every model built afterwards
# in the process loses its tied output head. One load at a time per process.
_LOAD_LOCK = threading.Lock()


def load_model(cfg: ModelConfig) -> LoadedModel:
    """Resolve, place and load the model and its processor. Raises ChordError subclasses.
    Loads in one process run one at a time (``_LOAD_LOCK``)."""
    with _LOAD_LOCK:
        return _load_model(cfg)


def _load_model(cfg: ModelConfig) -> LoadedModel:
    laps = Laps()
    lap = laps.lap
    from chord_core.model import preimport
    from chord_core.model.bytecode import bytecode_cache
    from chord_core.model.decode_step import compile_cache_env

    bytecode_cache()  # before the first import of transformers (and torch) in this process
    compile_cache_env()  # before anything of inductor picks its own cache dir
    preimport.join()  # a worker's imports began at its start: what is left is waited for here
    import torch

    from chord_core.model import fastgen, fp8, fused
    lap("imports_s")
    resolved = resolve_model(cfg)
    path = str(resolved.local_path or resolved.path_or_id)
    config = _load_config(path)
    family, coord_mode, cls = _model_class(getattr(config, "model_type", ""))
    kind, device_map, max_memory = device_plan(cfg)
    bf16 = kind == "cuda" and all(torch.cuda.get_device_capability(i)[0] >= 8
                                  for i in range(torch.cuda.device_count()))
    dtype = getattr(torch, choose_dtype(kind, bf16, cfg.dtype))
    placement = ""
    if device_map == PLACE or isinstance(device_map, str):
        meta = meta_model(cls, config, dtype)
        if device_map == PLACE:
            placed = place(cfg, meta, max_memory)
            device_map, max_memory, placement = placed.device_map, placed.max_memory, \
                placed.reason
        if isinstance(device_map, str):
            device_map, offloaded_bytes = planned_device_map(meta, device_map, max_memory)
            if isinstance(device_map, dict):
                check_placement(device_map, True, cfg.allow_offload, offloaded_bytes)
        del meta
    lap("plan_s")
    log.info("loading %s (%s) as %s, device_map=%s", cfg.model, family, dtype,
             device_map if not isinstance(device_map, dict) or len(device_map) < 4 else
             sorted({str(v) for v in device_map.values()}))
    with Pool(1, thread_name_prefix="chord-processor") as pool:
        loading = pool.submit(_load_processor, path, family)  # beside the weights
        model = _load_weights(cls, path, dtype=dtype, device_map=device_map,
                              max_memory=max_memory, attn_implementation=cfg.attn_implementation)
        lap("weights_s")
        hf_map = dict(getattr(model, "hf_device_map", None) or {"": input_device(model)})
        check_placement(hf_map, kind == "cuda", cfg.allow_offload)
        model.eval()
        processor, laps.steps["processor_thread_s"] = loading.result()
    lap("processor_s")  # what was left to wait for of the processor's thread
    template = getattr(processor, "chat_template", None) or getattr(
        processor.tokenizer, "chat_template", None)
    decoder = fastgen.for_model(cfg, model, processor)  # before FP8: its views of bf16
    if fused.wanted(cfg, kind):  # the prefill's norms and MLP activations (model/fused.py)
        fused.install(model)
    info = ModelInfo(id=cfg.model, dtype=str(dtype).replace("torch.", ""),
                     device_map={k: device_name(v) for k, v in hf_map.items()},
                     test_model=resolved.is_test, family=family, coords=coord_mode,
                     thinking=families.is_thinking(family, cfg.model, template),
                     fp8=cfg.fp8 and fp8.install(model) > 0)  # model/fp8.py
    lap("fast_path_s")
    return LoadedModel(model=model, processor=processor, info=info, family=family,
                       decoder=decoder, coord_mode=coord_mode, load_s=laps.total(),
                       input_device=input_device(model), resolved=resolved, phases=laps.steps,
                       placement=placement or _placement_line(info.device_map, cfg))


def _load_processor(path: str, family: str) -> tuple[Any, float]:
    """The processor (left padding for batches) and its tokenizer's first calls — the chat
    template of a describe and a grounding request compiled and tokenized — and the seconds
    they took. Runs on a thread while the weights load (``_load_model``): it makes no tensor,
    because the model's ``from_pretrained`` switches torch's default dtype process-wide
    meanwhile, and a tensor the image processor caches on its first call (its fused mean and
    std) would keep that dtype; the image and video processors' first calls stay in the
    warm-up (``analysis/warmup.py``)."""
    from transformers import AutoProcessor

    from chord_core.model.prompts import describe_messages, ground_messages

    t0 = time.perf_counter()
    try:
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"could not load the processor (tokenizer, image and video "
                         f"settings) in {path}: {type(exc).__name__}: {exc}",
                         hint="its files may be missing or corrupt; download the model again "
                              "(`hf download <repo> --local-dir <folder>`)") from exc
    processor.tokenizer.padding_side = "left"
    texts = [processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
             for messages in (describe_messages("warm-up"), ground_messages("warm-up", family))]
    processor.tokenizer(texts)  # python lists: no tensor
    return processor, time.perf_counter() - t0


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
              cancel: threading.Event | None, stop_token: int | None = None, reserve: int = 0,
              after: Callable[[Any], None] | None = None) -> tuple[Any, float]:
    """Greedy generate on the WHOLE processor output; returns (new token ids, seconds).
    ``stop_token`` ends a row like an end token (a Thinking model's ``</think>``). The fast
    decoder only: ``reserve`` cache slots kept free, ``after(new ids)`` run in the same hold
    of the model (before another request's generate overwrites the decoder's cache)."""
    import torch
    from transformers import StoppingCriteriaList

    if max_new_tokens < 1:
        raise ConfigError(f"max new tokens must be ≥ 1, got {max_new_tokens}",
                          hint="use e.g. --max-new-tokens 512")
    inputs = inputs.to(lm.input_device) if hasattr(inputs, "to") else inputs  # or parts
    tokenizer = lm.processor.tokenizer
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": False,
                              "pad_token_id": tokenizer.pad_token_id,
                              "stopping_criteria": StoppingCriteriaList(_stopping(cancel))}
    if min_new_tokens:
        kwargs["min_new_tokens"] = min(min_new_tokens, max_new_tokens)
    if stop_token is not None:
        eos = lm.model.generation_config.eos_token_id
        eos = list(eos) if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
        kwargs["eos_token_id"] = [*eos, int(stop_token)]
    t0 = time.perf_counter()
    with lm.lock, torch.inference_mode():
        if lm.decoder is not None:
            try:
                new = lm.decoder.generate(inputs, max_new_tokens, cancel=cancel,
                                          min_new_tokens=kwargs.get("min_new_tokens", 0),
                                          stop_token=stop_token, reserve=reserve).cpu()
                if after is not None:
                    after(new)
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
    patch = patch_px(lm.processor.image_processor)
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
                  cancel: threading.Event | None = None,
                  into: list[GroundOutput] | None = None) -> list[GroundOutput]:
    """Ground ``target`` in each image (one request per image, batched). Returns one output
    per image, in order; ``on_batch(done_images, total_images)`` after each batch. ``into``
    (a list) receives the outputs as each batch ends, so a caller still has the finished
    ones when a cancel (JobCancelled) stops the loop."""
    if batch_size < 1:
        raise ConfigError(f"batch size must be ≥ 1, got {batch_size}", hint="use --batch-size 8")
    outputs: list[GroundOutput] = [] if into is None else into
    total = len(images)
    for start in range(0, total, batch_size):
        _raise_if_cancelled(cancel)
        batch = images[start:start + batch_size]
        outputs.extend(_ground_batch(lm, batch, target, max_new_tokens, min_new_tokens, cancel))
        if on_batch is not None:
            on_batch(len(outputs), total)
    return outputs
