"""Processor inputs for Qwen2.5-VL / Qwen3-VL: frames and images already at the plan's size,
passed so the processor neither resamples nor resizes them.

* Video frames go WITH ``video_metadata`` and ``do_sample_frames=False``; otherwise the
  processor assumes 24 fps and the model's time axis (``second_per_grid_ts``) is wrong.
  Qwen3-VL also gets each frame's time (its "<t seconds>" text timestamps).
* The processor's pixel bounds are set to the frames' own size, so ``input_wh`` read back from
  its grid is what the model really saw.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from chord_core import families
from chord_core.errors import InputError
from chord_core.model.prompts import describe_messages, ground_messages

if TYPE_CHECKING:
    import numpy as np

    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

MIN_SIDE_PX = 28


# -- inputs ---------------------------------------------------------------------------------
def check_frames(frames: Any, ndim: int, what: str) -> tuple[int, int]:
    """(h, w) of uint8 RGB ``frames`` (a numpy array, or a torch tensor: frames NVDEC
    decoded on the model's GPU, which the processor then converts there); else InputError."""
    import numpy as np

    array = isinstance(frames, np.ndarray) or is_tensor(frames)
    if not array or frames.ndim != ndim or frames.shape[-1] != 3:
        shape = getattr(frames, "shape", None)
        raise InputError(f"{what} must be a uint8 RGB array with {ndim} dims (..., 3), got "
                         f"{type(frames).__name__} {shape}",
                         hint="pass frames from video.read_frames")
    if str(frames.dtype) not in ("uint8", "torch.uint8"):
        raise InputError(f"{what} must be uint8, got {frames.dtype}", hint="convert to uint8 RGB")
    h, w = frames.shape[-3], frames.shape[-2]
    if min(h, w) < MIN_SIDE_PX:
        raise InputError(f"{what} is {w}×{h}, smaller than {MIN_SIDE_PX} px on a side",
                         hint="sample at a larger size (multiples of 28)")
    return h, w


def is_tensor(x: Any) -> bool:
    """``x`` is a torch tensor (checked without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "dim")


def no_resize_kwargs(processor_part: Any, sizes: Sequence[tuple[int, int]],
                      frames: Sequence[int] = ()) -> dict[str, Any]:
    """Pixel bounds that keep inputs at their size. Sizes that are multiples of the model's
    token side (patch × merge: 28 px for Qwen2.5-VL) stay as they are; Qwen3-VL (32 px) rounds
    them to its own multiple, keeping the aspect — never a further down- or up-scale.
    Qwen3-VL's video processor bounds pixels summed over the frames (``frames`` per clip)."""
    side = patch_px(processor_part) * int(getattr(processor_part, "merge_size", 2))
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


def patch_px(processor_part: Any) -> int:
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
        h, w = check_frames(frames, 4, "video frames")
        if len(frames) == 0:
            raise InputError("no video frames to describe", hint="check that the clip decodes")
        sizes.append((h, w))
        meta = _video_metadata(metadata, len(frames))
        if families.family(lm.family).text_timestamps:
            meta = _timed_metadata(meta, metadata.get("timestamps_s"))
        metas.append(meta)
        texts.append(processor.apply_chat_template(describe_messages(prompt), tokenize=False,
                                                   add_generation_prompt=True))
    where = video_device_kwargs(lm)
    videos = [_to_device(c[0], where["device"]) if where else c[0] for c in clips]
    inputs = processor(text=texts, videos=videos, video_metadata=metas,
                       do_sample_frames=False, return_tensors="pt", padding=True,
                       **no_resize_kwargs(processor.video_processor, sizes,
                                           [len(c[0]) for c in clips]), **where)
    patch = patch_px(processor.video_processor)
    side = patch * int(getattr(processor.video_processor, "merge_size", 2))
    for (h, w), grid in zip(sizes, inputs["video_grid_thw"].tolist()):
        if abs(grid[1] * patch - h) >= side or abs(grid[2] * patch - w) >= side:
            log.warning("the processor resized video frames from %d×%d to %d×%d", w, h,
                        grid[2] * patch, grid[1] * patch)
    return inputs


def video_device_kwargs(lm: LoadedModel) -> dict[str, Any]:
    """Where the video processor converts frames: on the model's GPU when it has one. The
    processor's video path (uint8 → float32, rescale, normalise, patch layout, concatenation)
    is memory shuffling that takes ≈ 0.1 s a 30-frame 448×252 clip on a host core and writes
    float32 pixels four times the frames' size; on the GPU the uint8 frames go up once and
    the rest takes milliseconds (issue 36). On the CPU: the processor's default."""
    device = str(getattr(lm, "input_device", "") or "cpu")
    return {} if device == "cpu" else {"device": device}


def _to_device(frames: Any, device: str) -> Any:
    """Host frames as a uint8 tensor on ``device`` (one copy of the T×H×W×3 bytes): the
    processor's channel reordering then runs there too, not as a strided copy on the host.
    On a GPU the copy goes through a stream of its own: a copy from pageable memory on the
    compute stream would first wait for the work queued there (the previous part's prefill,
    ``describe_batch.describe_parts``), so the host would build these inputs only after it."""
    if is_tensor(frames):
        return frames
    import numpy as np
    import torch

    host = torch.from_numpy(np.ascontiguousarray(frames))
    if not device.startswith("cuda"):
        return host.to(device)
    compute = torch.cuda.current_stream(device)
    side = _UPLOAD.get(str(compute.device))
    if side is None:
        side = _UPLOAD[str(compute.device)] = torch.cuda.Stream(compute.device)
    with torch.cuda.stream(side):
        out = host.to(device)
    compute.wait_stream(side)  # the compute stream reads it after the copy
    out.record_stream(compute)  # its memory is not reused before the compute stream is done
    return out


_UPLOAD: dict[str, Any] = {}  # device → the stream frames are copied to it on


def build_image_inputs(lm: LoadedModel, images: Sequence[np.ndarray], target: str) -> Any:
    """Processor output for a batch of grounding requests: one image + prompt per row,
    left-padded."""
    sizes = [check_frames(img, 3, f"image {i}") for i, img in enumerate(images)]
    processor = lm.processor
    text = processor.apply_chat_template(ground_messages(target, lm.family), tokenize=False,
                                         add_generation_prompt=True)
    return processor(text=[text] * len(images), images=list(images), padding=True,
                     return_tensors="pt",
                     **no_resize_kwargs(processor.image_processor, sizes))
