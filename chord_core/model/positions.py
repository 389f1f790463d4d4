"""Qwen's 3-D rope positions, computed on the host before a prefill.

Given no ``position_ids``, a Qwen-VL forward works them out itself (``get_rope_index``): a
Python loop over the batch's rows that indexes and reads back GPU tensors, so the host
waits for the GPU a few times per row — hundreds of times in a 32-row entailment pass
(the H200 profile: 343 waits, GPU busy 83 % of the pass). The same function run on the
inputs' CPU copies, on the thread that builds the next pass while the GPU runs this one,
gives the same positions with no wait.

It is not assumed to match: the first call for a loaded model also runs the function on the
device and compares; on any difference or error the model keeps working them out itself
(one log line). Models without ``get_rope_index`` are left alone.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

_STATE = "_chord_host_positions"  # unset: not tried; True: checked and used; False: off
_INPUTS = ("input_ids", "attention_mask", "image_grid_thw", "video_grid_thw",
           "second_per_grid_ts", "mm_token_type_ids")


def add_host_positions(lm: LoadedModel, inputs: Any) -> Any:
    """``inputs`` (a dict-like of the model's inputs, the text ones on the CPU) with
    ``position_ids`` added when the model's own rope index ran on the host; else unchanged."""
    if "position_ids" in inputs:
        return inputs
    got = host_rope(lm, lm.model, lm.input_device, inputs)
    if got is not None:
        inputs["position_ids"] = got[0]
    return inputs


def host_rope(holder: Any, model: Any, device: Any, inputs: Any) -> tuple[Any, Any] | None:
    """(``position_ids``, the rows' rope deltas) for ``inputs`` from the model's own rope
    index run on CPU copies of its inputs, or None where that is off for ``holder`` (the
    object that keeps the one-time check: a LoadedModel, a decoder). The first call for a
    holder also runs it on ``device`` and compares; any difference or error turns it off."""
    state = getattr(holder, _STATE, None)
    if state is False:
        return None
    try:
        import torch

        fn = _rope_index(model)
        names = set(inspect.signature(fn).parameters)
        given = {k: inputs[k] for k in _INPUTS if k in names and inputs.get(k) is not None}
        with torch.inference_mode():
            positions, deltas = fn(**{k: v.cpu() for k, v in given.items()})
            if state is None:
                there, there_deltas = fn(**{k: v.to(device) for k, v in given.items()})
                if not (torch.equal(positions, there.cpu()) and
                        torch.equal(deltas.reshape(-1), there_deltas.reshape(-1).cpu())):
                    raise ValueError("positions differ from the model's own")
                object.__setattr__(holder, _STATE, True)
                log.info("rope positions: computed on the host (checked against the device)")
    except Exception as exc:  # noqa: BLE001 — the model computes them itself, as before
        log.info("rope positions stay with the model (%s: %s)", type(exc).__name__, exc)
        object.__setattr__(holder, _STATE, False)
        return None
    return positions, deltas


def _rope_index(model: Any) -> Any:
    for owner in (getattr(model, "model", None), model):
        fn = getattr(owner, "get_rope_index", None)
        if callable(fn):
            return fn
    raise AttributeError("the model has no get_rope_index")
