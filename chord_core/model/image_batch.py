"""Model inputs for a batch of still images, built on the model's device.

The processor's image path (``processor(text=…, images=…)``) resizes, rescales, normalises and
cuts each image into patches on the CPU in float32: for 32 images of 448×448 that is most of a
second, longer than the 7B prefill it feeds (issue 13's profile). Images the engine sends
already have the model's size (sides a multiple of patch × merge, e.g. 28 px), so the resize
is the identity and what is left is arithmetic: here the uint8 pixels go to the device once
and are normalised and laid out as patches there, and the text is tokenized with the image
placeholder expanded to the image's token count. Images may be torch uint8 tensors (frames
NVDEC decoded on the model's GPU): they are stacked where they are, never copied to the host.

The layout is the processor's, and this module checks that rather than assuming it: the first
batch of each loaded model is built both ways and compared (token ids, masks, every tensor
the processor returns, pixels within float rounding). A model or transformers version whose
processor gives anything else keeps the processor from then on, with one log line.
``image_batch_inputs`` returns None whenever the processor should be used instead.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import numpy as np

    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

_CHECKED = "_chord_image_batch"  # attribute on the LoadedModel: True / False once checked
_PIXEL_ATOL = 1e-3


def image_batch_inputs(lm: LoadedModel, images: Sequence[np.ndarray], texts: Sequence[str],
                       reference: Callable[[Sequence[np.ndarray], Sequence[str]], Any]
                       ) -> Any | None:
    """The model inputs for one image + text per row (left-padded), built on the device; or
    None when this batch (or this model) needs the processor. ``texts`` are chat-template
    texts with one image placeholder each; ``reference(images, texts)`` is the processor path,
    used once per model to check this one."""
    state = getattr(lm, _CHECKED, None)
    if state is False or not images or not _fits(lm.processor, images):
        return None
    if state is None:
        state = _check(lm, images[:2], texts[:2], reference)
        object.__setattr__(lm, _CHECKED, state)
        if not state:
            return None
    return _build(lm, images, texts, _keys(lm))


def _fits(processor: Any, images: Sequence[np.ndarray]) -> bool:
    ip = getattr(processor, "image_processor", None)
    if ip is None or not getattr(processor, "image_token", None):
        return False
    side = int(getattr(ip, "patch_size", 14)) * int(getattr(ip, "merge_size", 2))
    return all(getattr(img, "ndim", 0) == 3 and img.shape[2] == 3
               and str(img.dtype) in ("uint8", "torch.uint8")
               and img.shape[0] % side == 0 and img.shape[1] % side == 0 for img in images)


def _keys(lm: LoadedModel) -> tuple[str, ...]:
    return getattr(lm, _CHECKED + "_keys", ())


def _build(lm: LoadedModel, images: Sequence[np.ndarray], texts: Sequence[str],
           keys: Sequence[str]) -> Any:
    import torch
    from transformers import BatchFeature

    processor = lm.processor
    ip = processor.image_processor
    patch, merge = int(ip.patch_size), int(ip.merge_size)
    tp = int(getattr(ip, "temporal_patch_size", 2))
    by_size: dict[tuple[int, int], list[int]] = {}
    for i, img in enumerate(images):
        by_size.setdefault(img.shape[:2], []).append(i)
    parts: dict[int, Any] = {}
    for rows in by_size.values():  # one stacked pass per image size
        values = _patches([images[i] for i in rows], lm.input_device, ip, patch, merge, tp)
        for i, v in zip(rows, values.chunk(len(rows))):
            parts[i] = v
    grids, expanded = [], []
    token = processor.image_token
    for img, text in zip(images, texts):
        grid = [1, img.shape[0] // patch, img.shape[1] // patch]
        grids.append(grid)
        if text.count(token) != 1:
            raise ValueError(f"expected one {token} in the prompt, found {text.count(token)}")
        expanded.append(text.replace(token, token * (grid[1] * grid[2] // (merge * merge)), 1))
    pixels = [parts[i] for i in range(len(images))]
    enc = processor.tokenizer(expanded, padding=True, return_tensors="pt")
    data: dict[str, Any] = {"input_ids": enc["input_ids"],
                            "attention_mask": enc["attention_mask"]}
    if "mm_token_type_ids" in keys:
        image_id = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        data["mm_token_type_ids"] = (enc["input_ids"] == image_id).to(torch.long)
    data["pixel_values"] = torch.cat(pixels) if len(pixels) > 1 else pixels[0]
    data["image_grid_thw"] = torch.tensor(grids, dtype=torch.long)
    return BatchFeature({k: data[k] for k in keys if k in data})


def _patches(images: Sequence[np.ndarray], device: str, ip: Any, patch: int, merge: int,
             tp: int) -> Any:
    """Same-size H×W×3 uint8 images → their patches, image after image: rescaled,
    normalised, each patch repeated ``tp`` times in time (an image is one frame), rows in
    merge-window order, each row channel × time × patch × patch — the processor's layout."""
    import numpy as np
    import torch

    n, (h, w) = len(images), images[0].shape[:2]
    gh, gw = h // patch, w // patch
    if all(torch.is_tensor(img) for img in images):  # decoded on the GPU: stays there
        x = torch.stack([torch.as_tensor(img) for img in images]).to(device, non_blocking=True)
    else:
        x = torch.from_numpy(np.stack([np.asarray(img) for img in images])).to(
            device, non_blocking=True)
    x = x.permute(0, 3, 1, 2).to(torch.float32)
    scale = float(ip.rescale_factor) if getattr(ip, "do_rescale", True) else 1.0
    if getattr(ip, "do_normalize", True):
        mean = torch.tensor(ip.image_mean, dtype=torch.float32, device=x.device)
        std = torch.tensor(ip.image_std, dtype=torch.float32, device=x.device)
        # (x·scale − mean) / std as one multiply-add per pixel
        x = torch.addcmul((-mean / std).view(1, 3, 1, 1), x, (scale / std).view(1, 3, 1, 1))
    else:
        x = x * scale
    # n, c, (gh/m, m, p), (gw/m, m, p) → n, gh/m, gw/m, m, m, c, p, p: rows in merge windows
    x = x.reshape(n, 3, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 2, 5, 3, 6, 1, 4, 7)
    x = x.unsqueeze(6).expand(-1, -1, -1, -1, -1, -1, tp, -1, -1)  # the frame repeated in time
    return x.reshape(n * gh * gw, 3 * tp * patch * patch)


def _check(lm: LoadedModel, images: Sequence[np.ndarray], texts: Sequence[str],
           reference: Callable[[Sequence[np.ndarray], Sequence[str]], Any]) -> bool:
    """Build a small batch both ways and compare; remembers the processor's keys."""
    import torch

    try:
        ref = reference(images, texts)
        keys = tuple(ref)
        object.__setattr__(lm, _CHECKED + "_keys", keys)
        mine = _build(lm, images, texts, keys)
        problem = _difference(ref, mine, torch)
    except Exception as exc:  # noqa: BLE001 — any surprise means: keep the processor
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        log.info("image inputs: the processor path stays (%s)", problem)
        return False
    log.info("image inputs: built on %s (checked against the processor)", lm.input_device)
    return True


def _difference(ref: Any, mine: Any, torch: Any) -> str:
    if set(ref.keys()) != set(mine.keys()):
        return f"keys {sorted(ref.keys())} vs {sorted(mine.keys())}"
    for key in ref:
        a, b = ref[key], mine[key]
        if not (torch.is_tensor(a) and torch.is_tensor(b)):
            return f"{key} is not a tensor"
        if tuple(a.shape) != tuple(b.shape):
            return f"{key} shape {tuple(a.shape)} vs {tuple(b.shape)}"
        a, b = a.cpu(), b.cpu()
        if a.is_floating_point():
            if not torch.allclose(a.float(), b.float(), atol=_PIXEL_ATOL, rtol=0):
                return f"{key} differs by {float((a.float() - b.float()).abs().max()):.3g}"
        elif not torch.equal(a, b.to(a.dtype)):
            return f"{key} differs"
    return ""
