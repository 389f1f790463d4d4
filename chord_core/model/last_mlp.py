"""The language model's last MLP at the one position a call keeps.

Every prefill Chord runs asks for the logits of the last position only (``logits_to_keep=1``:
an entailment pass, the prefill before a generation, a grounding prefill). The last decoder
layer's keys and values come from that layer's input, so its MLP output at every other
position reaches nothing the call returns: the final norm runs over those positions, but the
head reads only the last. That MLP is ≈ 87 % of the layer's products at the 7B shape (3 ×
3,584 × 18,944 a token against ≈ 29 M for the attention's projections), so ≈ 3 % of a
prefill's language-model arithmetic (1 layer of 28) was spent on positions no one reads. On
one H100 (session 13, ``prefill_ab.py``) it took 1.8 % off a 32-pair entailment pass and
2.3 % off a 128-frame grounding prefill.

:func:`install` puts four hooks on one loaded model (nothing global is patched): one on the
model records whether the call keeps one position (``logits_to_keep == 1``, no
``output_hidden_states``, no ``labels``); two on the last layer's MLP run it on the last
position alone and hand back zeros elsewhere, so the residual stream carries the attention's
output there. The kept position's arithmetic is the same as before, row by row (left padding:
the last position is every row's own; with right padding it is the same position either way).
Decode steps (one position) and calls that keep more are untouched. Hooks, not a swapped
``forward``: the fused forwards (``fused``) and FP8 products stay what they are under them.
:func:`disabled` runs every position meanwhile, for benchmarks.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

log = logging.getLogger(__name__)

_CALL: ContextVar[dict | None] = ContextVar("chord_last_mlp_call", default=None)


def last_layer_mlp(model: Any) -> Any:
    """The last text decoder layer's MLP when it is a dense gated one, else None."""
    from chord_core.model.fused import _is_silu_mlp

    inner = getattr(model, "model", None)
    text = getattr(inner, "language_model", None) or inner
    layers = getattr(text, "layers", None)
    if not layers:
        return None
    mlp = getattr(layers[-1], "mlp", None)
    return mlp if mlp is not None and _is_silu_mlp(mlp) else None


def install(model: Any) -> bool:
    """Trim ``model``'s last MLP to the kept position (module docstring); False where the
    model has no dense last MLP to trim (a mixture of experts keeps its own)."""
    if "_chord_last_mlp" in model.__dict__:
        return True
    mlp = last_layer_mlp(model)
    if mlp is None:
        return False
    state = {"on": True}
    state["handles"] = [
        model.register_forward_pre_hook(_enter, with_kwargs=True),
        model.register_forward_hook(_leave, always_call=True),
        mlp.register_forward_pre_hook(_last_only),
        mlp.register_forward_hook(_spread)]
    model.__dict__["_chord_last_mlp"] = state
    log.debug("the last MLP runs at the kept position only (logits_to_keep=1)")
    return True


def installed(model: Any) -> bool:
    return "_chord_last_mlp" in model.__dict__


@contextmanager
def disabled(model: Any) -> Iterator[None]:
    """Every position through the last MLP meanwhile (benchmarks time both)."""
    state = model.__dict__.get("_chord_last_mlp")
    before = state["on"] if state else None
    if state:
        state["on"] = False
    try:
        yield
    finally:
        if state:
            state["on"] = before


def _enter(model: Any, args: tuple, kwargs: dict) -> None:
    keep = kwargs.get("logits_to_keep")
    trim = model.__dict__["_chord_last_mlp"]["on"] and type(keep) is int and keep == 1 \
        and kwargs.get("labels") is None and not kwargs.get("output_hidden_states") \
        and not getattr(getattr(model, "config", None), "output_hidden_states", False)
    call = {"trim": trim, "shape": None}
    call["token"] = _CALL.set(call)


def _leave(model: Any, args: tuple, out: Any) -> None:
    call = _CALL.get()
    if call is not None:
        _CALL.reset(call["token"])


def _last_only(mlp: Any, args: tuple) -> tuple | None:
    call = _CALL.get()
    x = args[0] if args else None
    if call is None or not call["trim"] or x is None or x.dim() != 3 or x.shape[1] < 2:
        return None
    call["shape"] = x.shape
    return (x[:, -1:], *args[1:])


def _spread(mlp: Any, args: tuple, out: Any) -> Any:
    call = _CALL.get()
    if call is None or call["shape"] is None:
        return None
    shape, call["shape"] = call["shape"], None
    full = out.new_zeros(shape)
    full[:, -1:] = out
    return full
