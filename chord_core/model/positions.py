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
    state = getattr(lm, _STATE, None)
    if state is False or "position_ids" in inputs:
        return inputs
    try:
        import torch

        fn = _rope_index(lm)
        names = set(inspect.signature(fn).parameters)
        given = {k: inputs[k] for k in _INPUTS if k in names and inputs.get(k) is not None}
        with torch.inference_mode():
            positions = fn(**{k: v.cpu() for k, v in given.items()})[0]
            if state is None:
                there = fn(**{k: v.to(lm.input_device) for k, v in given.items()})[0]
                if not torch.equal(positions, there.cpu()):
                    raise ValueError("positions differ from the model's own")
                object.__setattr__(lm, _STATE, True)
                log.info("rope positions: computed on the host (checked against the device)")
    except Exception as exc:  # noqa: BLE001 — the model computes them itself, as before
        log.info("rope positions stay with the model (%s: %s)", type(exc).__name__, exc)
        object.__setattr__(lm, _STATE, False)
        return inputs
    inputs["position_ids"] = positions
    return inputs


def _rope_index(lm: LoadedModel) -> Any:
    for owner in (getattr(lm.model, "model", None), lm.model):
        fn = getattr(owner, "get_rope_index", None)
        if callable(fn):
            return fn
    raise AttributeError("the model has no get_rope_index")
