"""Fast greedy decoding for Qwen2.5-VL and Qwen3-VL: a fixed-size KV cache, the decode step replayed as
one CUDA graph, and no host↔device synchronisation inside the token loop.

Why: transformers' ``generate`` launches every kernel of every layer from Python for each
token and synchronises at every step, so at batch 1 an H200 decodes a 7B model at about a
fifth of what its memory bandwidth allows (issue 5; ``docs/benchmarks.md``). Here:

* **prefill** is the model's own forward — vision tower, mrope positions, left padding, all as
  ``generate`` does them — into a ``DynamicCache`` that is then copied into fixed-size buffers;
* **each decode step** (``decode_step.py``) uses the model's own norms, rotary function,
  output/down projections, activation and ``lm_head``; q/k/v and gate/up run as one product
  each over the same weights (the layer's parameters become views of the fused tensors). It
  does greedy selection with the generation config's repetition penalty, ``min_new_tokens``,
  EOS and padding on the GPU. On CUDA the step is captured once per (batch, cache length) as a
  CUDA graph and replayed; on GPUs it is ``torch.compile``d, batch 1 apart from larger
  batches (inductor writes its matrix-vector products itself: ``decode_step``);
* the host reads the "every row finished" flag only every ``CHECK_EVERY`` steps.

It computes the same function as ``generate(do_sample=False)`` (same weights, same processor
output, same logits processors); the kernels differ (a masked fixed-length attention instead
of a growing cache), so bf16 results differ in the last bits. The tests compare tokens with
``generate``'s on the CPU (float32: identical); ``benchmarks/speed.py`` reports the agreement
on GPUs. If compiling or capturing fails, the step runs without it (logged), never wrong.

Limits (then :func:`unsupported_reason` says why and the caller uses ``generate``): the
language model must sit on ONE device (a sharded model decodes through ``generate``), the
generation config may ask only for processors implemented here, and no sliding-window layers.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from chord_core.model import decode_step as step

log = logging.getLogger(__name__)

CHECK_EVERY = 16      # decode steps between looks at the "all rows finished" flag
SPARE_SLOTS = 8       # cache slots past the longest graph's length (see _buffers_for)

# Generation-config fields that would add a logits processor this decoder does not implement.
_UNSUPPORTED_FIELDS = ("no_repeat_ngram_size", "bad_words_ids", "suppress_tokens",
                       "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id",
                       "sequence_bias", "encoder_repetition_penalty", "exponential_decay_length_penalty",
                       "renormalize_logits", "guidance_scale")


# Attention modules whose decode step fastgen reproduces: q/k/v projections (with bias in
# Qwen2.5-VL), per-head q/k RMS norms before the rotation (Qwen3-VL), and the module's own
# ``apply_rotary_pos_emb`` on the cos/sin its rotary module recomposes (sectioned mrope in
# Qwen2.5-VL, interleaved in Qwen3-VL; a decode token has t = h = w, so either layout gives
# the plain 1-D rotation of its position). Qwen3-VL's deepstack features are added to the
# hidden states of visual tokens in the prefill only (the model's own forward).
_ATTENTION_CLASSES = ("Qwen2_5_VLAttention", "Qwen3VLTextAttention")


def for_model(cfg: Any, model: Any, processor: Any) -> FastDecoder | None:
    """The fast path for a loaded model: grouped vision attention (``fastvision``), the patch
    embedding as a GEMM (``patch_embed``), aligned vision MLPs (``mlp_align``), the last MLP
    at the kept position only (``last_mlp``) and the fast decoder — or None where
    ``cfg.decoder == "generate"`` asks for plain transformers, or the model/placement is one
    the decoder does not handle (the log says why)."""
    if cfg.decoder != "fast":
        return None
    from chord_core.model import fastvision, last_mlp, mlp_align, patch_embed
    fastvision.install(model)
    patch_embed.install(model)
    mlp_align.install(model)
    last_mlp.install(model)
    reason = unsupported_reason(model)
    if reason:
        log.info("decoding with transformers' generate: %s", reason)
        return None
    from chord_core.config import one_row_graphs

    on_gpu = next(model.parameters()).device.type == "cuda"
    decoder = FastDecoder(model, pad_token_id=processor.tokenizer.pad_token_id,
                          compile=cfg.compile if cfg.compile is not None else on_gpu)
    if not one_row_graphs():
        decoder.min_rows = 2
    return decoder


def unsupported_reason(model: Any) -> str | None:
    """Why this model cannot use the fast decoder (None = it can): the family table first
    (``families.MODEL_TYPES``), then the layers themselves."""
    from chord_core.families import MODEL_TYPES

    row = MODEL_TYPES.get(str(getattr(getattr(model, "config", None), "model_type", "")))
    if row is not None and not row.fast_decoder:
        return f"the fast decoder does not run {row.class_name} (mixture of experts)"
    inner = getattr(getattr(model, "model", None), "language_model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(model, "lm_head"):
        return f"{type(model).__name__} has no model.language_model.layers / lm_head"
    layer = inner.layers[0]
    if not all(hasattr(layer, a) for a in ("self_attn", "mlp", "input_layernorm",
                                           "post_attention_layernorm")):
        return f"unexpected decoder layer {type(layer).__name__}"
    moe = next((lay.mlp for lay in inner.layers if not all(
        hasattr(lay.mlp, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn"))), None)
    if moe is not None:  # e.g. Qwen3-VL-MoE: routed experts are not implemented in the step
        return f"a decoder layer's MLP is {type(moe).__name__} (mixture of experts)"
    if type(layer.self_attn).__name__ not in _ATTENTION_CLASSES:
        return ("the fast decoder is written for Qwen2.5-VL / Qwen3-VL attention, not "
                f"{type(layer.self_attn).__name__}")
    rope = getattr(sys.modules.get(type(layer.self_attn).__module__), "apply_rotary_pos_emb", None)
    if rope is None:
        return "the attention module's rotary function was not found"
    cfg = getattr(model.config, "text_config", model.config)
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention is not implemented by the fast decoder"
    devices = {p.device for p in inner.parameters()} | {p.device for p in model.lm_head.parameters()}
    if len(devices) != 1:
        return f"the language model spans {len(devices)} devices (sharded)"
    gen = model.generation_config
    for name in _UNSUPPORTED_FIELDS:
        value = getattr(gen, name, None)
        if value not in (None, False, 1.0, [], 0) and not (name == "guidance_scale" and value == 1):
            return f"generation config sets {name}={value!r}"
    return None


def length_bucket(n: int) -> int:
    """Cache length for ``n`` positions: a ladder of sizes (≤ 25 % masked waste above 2k), so
    a few captured graphs serve every prompt length."""
    for size in _LADDER:
        if n <= size:
            return size
    return -(-n // 8192) * 8192


_LADDER = (256, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192, 10240,
           12288, 16384, 20480, 24576, 32768)


def batch_bucket(n: int) -> int:
    """Rows a decode graph is captured for: the next power of two (spare rows idle)."""
    return 1 << max(0, (n - 1).bit_length())


@dataclass
class _Buffers:
    """Everything one decode step reads and writes, for one batch size, on the device: the
    KV cache of every layer (capacity ``cap`` positions; a graph for a shorter length uses a
    prefix view) and the decode state. Graphs capture these addresses, so they are reused."""

    k: list
    v: list
    tok: Any        # [B] long   token fed into the next step
    pos: Any        # [B] long   its rotary position
    cur: Any        # [1] long   its cache index
    step: Any       # [1] long   tokens generated so far
    min_new: Any    # [1] long
    limit: Any      # [B] long   per-row max new tokens
    valid: Any      # [B, cap] bool  which cache entries a row attends to
    presence: Any   # [B, V] bool  tokens seen (repetition penalty)
    done: Any       # [B] bool
    out: Any        # [B, cap] long  generated tokens

    @property
    def cap(self) -> int:
        return self.valid.shape[1]

    @property
    def rows(self) -> int:
        return self.valid.shape[0]


@dataclass
class _Prefilled:
    """One part's prefill: its token ids and mask [b, n], the model's cache of it, its last
    position's logits [b, V] (float32) and its rows' rotary offsets [b]."""

    ids: Any
    mask: Any
    cache: Any
    logits: Any
    deltas: Any


@dataclass
class _Left:
    """What the last ``generate`` left in its buffers, for ``continue_logits``: its ``b``
    rows, the prompt length ``p`` (decoding started at cache index ``p``), the ``steps``
    tokens generated, each row's rotary position of its first new token (``start``) and
    the graph length the buffers were used at."""

    buf: Any
    b: int
    p: int
    steps: int
    start: Any
    length: int


@dataclass
class _EagerStep:
    """Stands in for a CUDA graph where there is none (CPU): replays the step eagerly."""

    decoder: Any
    buf: _Buffers
    length: int

    def replay(self) -> None:
        self.decoder._step(self.buf, self.length)


class FastDecoder:
    """Greedy generation for one loaded model (one instance per model; not thread-safe —
    callers hold ``LoadedModel.lock``)."""

    def __init__(self, model: Any, *, pad_token_id: int | None = None,
                 use_graphs: bool | None = None, compile: bool = False) -> None:
        import torch

        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"fast decoding unavailable: {reason}")
        self.model = model
        self.text = model.model.language_model
        self.layers = list(self.text.layers)
        attn = self.layers[0].self_attn
        self.rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        text_cfg = model.config.get_text_config()
        self.n_kv = text_cfg.num_key_value_heads
        self.head_dim = attn.head_dim
        self.device = self.text.embed_tokens.weight.device
        self.dtype = self.text.embed_tokens.weight.dtype
        self.vocab = model.lm_head.weight.shape[0]
        gen = model.generation_config
        eos = gen.eos_token_id
        eos = list(eos) if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
        # the end tokens, and one slot more: a caller's own stop token for one generate
        # (``stop_token``: a Thinking model's ``</think>``), else a copy of the first end token;
        # filled in place, so the captured graphs read it as they read the rest
        self.eos = torch.tensor(eos + eos[:1], dtype=torch.long, device=self.device) \
            if eos else None
        self._eos0 = eos[0] if eos else None
        pad = pad_token_id if pad_token_id is not None else gen.pad_token_id
        self.pad = int(pad if pad is not None else (eos[0] if eos else 0))
        self.penalty = float(gen.repetition_penalty or 1.0)
        self.use_graphs = (self.device.type == "cuda") if use_graphs is None else use_graphs
        # (one row, more rows): batch 1 has step functions of its own (``decode_step``)
        self._one_row, self._rows = step.functions(compile)
        self.compiled = compile
        # fewest rows of a graph. 2: a lone request rides in the 2-row graph, the layout
        # before batch 1 had its own functions (benchmarks time it); CHORD_ONE_ROW_GRAPHS=0
        # asks for it where compiling batch 1's tuned pieces would cost more than they save
        self.min_rows = 1
        self._fused = [step.fuse_projections(layer) for layer in self.layers]
        self._next_norm = [layer.input_layernorm for layer in self.layers[1:]] + [self.text.norm]
        if compile:  # fixed shapes: the compiler specialises on them instead of symbols
            step.mark_static([self.eos, *(t for f in self._fused for t in (f[0], f[1], f[3]))])
        self._buffers: OrderedDict[int, _Buffers] = OrderedDict()
        self._graphs: dict[tuple[int, int], Any] = {}
        self._pool = None
        self._left: _Left | None = None  # the last generate's state (``continue_logits``)
        self.stats = {"graphs": 0, "capture_s": 0.0, "captured_on_request": 0}

    # -- public -------------------------------------------------------------------------
    def clear(self) -> None:
        """Drop every buffer and graph (after an out-of-memory error, say)."""
        self._graphs.clear()
        self._buffers.clear()
        self._left = None

    def rows_for(self, batch: int) -> int:
        """Rows of the graph a batch of ``batch`` requests runs in."""
        return max(self.min_rows, batch_bucket(batch))

    def kv_bytes(self, rows: int, length: int) -> int:
        return 2 * len(self.layers) * rows * self.n_kv * length * self.head_dim * \
            self.text.embed_tokens.weight.element_size()  # the buffers' dtype (self.dtype)

    def prepare(self, batch_sizes: tuple[int, ...], max_len: int,
                on_graph: Any = None) -> float:
        """Allocate buffers and capture the decode graph for every cache length up to
        ``max_len`` for these batch sizes, so no request pays for a capture (a worker calls
        this at start; on the CPU the eager steps are registered the same way, so a
        request's ``captured_on_request`` counts there too). ``on_graph(done, total)``
        after each. Returns seconds spent."""
        import torch

        t0 = time.perf_counter()
        top = length_bucket(max_len)
        sizes = [x for x in _LADDER if x < top] + [top]
        rows_all = sorted({self.rows_for(b) for b in batch_sizes})
        done, total = 0, len(rows_all) * len(sizes)
        with torch.inference_mode():
            for rows in rows_all:
                buf = self._buffers_for(rows, top)
                for size in sizes:
                    self._graph(buf, size, on_request=False)
                    done += 1
                    if on_graph is not None:
                        on_graph(done, total)
        return time.perf_counter() - t0

    def held_rows(self, length: int) -> list[int]:
        """Row counts whose decode buffers are allocated and hold ``length`` positions (a
        batch of that many rows needs no new memory for its cache)."""
        return [rows for rows, buf in self._buffers.items() if buf.cap >= length]

    def prepared(self, batch: int, length: int) -> bool:
        """Whether a batch of ``batch`` rows at ``length`` positions has its step ready."""
        return (self.rows_for(batch), length_bucket(length)) in self._graphs

    def generate(self, inputs: Any, max_new_tokens: int, *, min_new_tokens: int = 0,
                 cancel: threading.Event | None = None,
                 force_tokens: Any = None, stop_token: int | None = None,
                 reserve: int = 0) -> Any:
        """New token ids [B, T] for a processor output (on this model's device), greedy.
        Rows that finish early are padded with the pad id, like ``generate``; ``stop_token``
        ends a row as an end token does (kept in its output), and the call once every row
        has ended (a model without end tokens ignores it).

        ``inputs`` may also be a sequence or iterator of processor outputs (parts): each is
        prefilled on its own as it comes — an iterator may build the next part while the GPU
        runs this one's prefill — and all rows then decode as one batch, in the parts' order
        (``prefill_parts``).

        ``force_tokens`` [B, T] (a diagnostic): feed these tokens instead of the model's own
        choices; the result is then the model's argmax at each step of that fixed path
        (teacher forcing), which is how agreement with another decoder is measured.

        ``reserve``: cache slots kept free past the answer for ``continue_logits``."""
        import torch

        with torch.inference_mode():
            if stop_token is None or self.eos is None:
                return self._generate(inputs, max_new_tokens, min_new_tokens, cancel,
                                      force_tokens, reserve)
            self.eos[-1].fill_(int(stop_token))
            try:
                return self._generate(inputs, max_new_tokens, min_new_tokens, cancel,
                                      force_tokens, reserve)
            finally:
                self.eos[-1].fill_(self._eos0)

    def continue_logits(self, keep: list[int], tails: list[list[int]]) -> Any:
        """After ``generate``, from the cache it left: row ``r`` keeps its first ``keep[r]``
        new tokens and is fed ``tails[r]`` (non-empty) after them. Returns the logits
        [b, V] (float32) at each row's last tail token — the model's next-token scores after
        prompt + kept tokens + tail, without a second prefill of the prompt — or None when
        there is nothing to continue or too little room (``generate``'s ``reserve``).

        Rows are fed in lockstep, right-aligned: a row with a shorter feed sits out the
        first steps (what those steps write for it is masked and its position not moved),
        so every row's last token is fed at the last step. The tokens a row does not keep
        are masked out of its cache. The buffers are the continuation's afterwards."""
        import torch

        left, self._left = self._left, None
        if left is None or len(keep) != left.b or len(tails) != left.b:
            return None
        buf, b, p, steps = left.buf, left.b, left.p, left.steps
        made = buf.out[:b, :steps].tolist()
        # the last new token was chosen but never fed: the cache holds steps - 1 of them
        cached = [min(max(0, int(k)), steps - 1) for k in keep]
        feeds = [made[r][c:max(c, min(int(keep[r]), steps))] + [int(t) for t in tails[r]]
                 for r, c in enumerate(cached)]
        end, width = p + steps - 1, max(len(f) for f in feeds)
        if not all(tails) or end + width > left.length:
            return None
        with torch.inference_mode():
            dev = self.device
            kept = torch.tensor(cached, device=dev)
            slot = torch.arange(buf.cap, device=dev)
            buf.valid[:b] &= ~((slot >= p + kept[:, None]) & (slot < end))
            buf.pos[:b] = left.start + kept
            buf.cur.fill_(end)
            grid = torch.full((buf.rows, width), self.pad, dtype=torch.long)
            for r, f in enumerate(feeds):
                grid[r, width - len(f):] = torch.tensor(f, dtype=torch.long)
            grid = grid.to(dev)
            fed = torch.tensor([len(f) for f in feeds] + [0] * (buf.rows - b), device=dev)
            sits = torch.arange(width, device=dev) < (width - fed)[:, None]  # before its feed
            logits = None
            for t in range(width):
                at = buf.cur.clone()
                buf.tok.copy_(grid[:, t])
                _, x = self._hidden(buf, left.length)
                logits = self.model.lm_head(x)[:, -1]
                buf.pos.add_(1)
                buf.cur.add_(1)
                out = sits[:, t]  # rows sitting this step out: forget what it wrote
                buf.valid[:, at] &= ~out[:, None]
                buf.pos.sub_(out.long())
        return logits[:b].float()

    # -- internals -------------------------------------------------------------------------
    def prefill_parts(self, inputs: Any) -> list[_Prefilled]:
        """The model's own forward over each part (one processor output, or several): its
        cache, its last position's logits and its rows' rotary offsets. Qwen's 3-D rope
        positions are worked out on the host first (``positions.host_rope``): the model's
        own loop over the rows waits for the GPU a few times a row (1,174 waits in a
        128-frame grounding prefill on an H100, the GPU 90 % busy)."""
        import torch

        from chord_core.model.positions import host_rope

        parts = [inputs] if hasattr(inputs, "keys") else inputs
        done = []
        for part in parts:
            ids, mask = part["input_ids"], part.get("attention_mask")
            rope = None if "position_ids" in part else \
                host_rope(self, self.model, self.device, part)
            if rope is not None:
                part = {**part, "position_ids": rope[0].to(self.device, non_blocking=True)}
            out = self.model(**part, use_cache=True, logits_to_keep=1)
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            # the rows' offsets: the host's, else the ones this forward set on the model
            deltas = rope[1] if rope is not None else \
                getattr(self.model.model, "rope_deltas", None)
            deltas = torch.zeros(ids.shape[0], dtype=torch.long, device=self.device) \
                if deltas is None else deltas.reshape(-1).to(self.device).clone()
            done.append(_Prefilled(ids, torch.ones_like(ids) if mask is None else mask, cache,
                                   out.logits[:, -1].float(), deltas))
            del out
        return done

    def _generate(self, inputs, max_new, min_new, cancel, force, reserve=0):
        import torch

        self._left = None
        parts = self.prefill_parts(inputs)
        if not parts:
            raise ValueError("nothing to generate for: no inputs")
        b, p = sum(x.ids.shape[0] for x in parts), max(x.ids.shape[1] for x in parts)
        length, rows = length_bucket(p + max_new + max(0, reserve)), self.rows_for(b)
        buf = self._buffers_for(rows, length)
        # the graph before the state is loaded: capturing runs warm-up steps on the buffers
        graph = self._graph(buf, length, on_request=True)
        self._load_state(buf, parts, p, max_new, min_new)
        start = buf.pos[:b].clone()
        logits = torch.cat([x.logits for x in parts])
        ids = parts[0].ids if len(parts) == 1 else None
        if force is not None and ids is None:
            raise ValueError("teacher forcing takes one processor output, not parts")
        del parts
        if rows > b:
            logits = torch.cat([logits, logits.new_zeros(rows - b, logits.shape[1])])
        self._advance(buf, self._select(logits, buf))
        steps = 1
        while steps < max_new:
            if force is not None:
                self._force(buf, ids, force[:, :steps])
            graph.replay()
            steps += 1
            if cancel is not None and cancel.is_set():
                break
            if force is None and steps % CHECK_EVERY == 0 and bool(buf.done.all()):
                break
        self._left = _Left(buf, b, p, steps, start, length)
        return buf.out[:b, :steps].clone()

    def _buffers_for(self, rows: int, length: int) -> _Buffers:
        import torch

        buf = self._buffers.get(rows)
        if buf is not None and buf.cap >= length:
            self._buffers.move_to_end(rows)
            return buf
        if buf is not None:  # too short: reallocate (its graphs point at the old memory)
            self._drop(rows)
        # A few slots past the longest graph: every graph then reads a strict prefix, so the
        # compiled step sees one memory layout for all lengths (no recompilation when the
        # first graph traced happened to span the whole buffer).
        length += SPARE_SLOTS
        if self.device.type == "cuda":
            need = self.kv_bytes(rows, length)
            while self._buffers and torch.cuda.mem_get_info(self.device)[0] < 2 * need:
                self._drop(next(iter(self._buffers)))  # least recently used batch size
        dev, kv = self.device, (rows, self.n_kv, length, self.head_dim)
        long = {"dtype": torch.long, "device": dev}
        buf = _Buffers(k=[torch.zeros(kv, dtype=self.dtype, device=dev) for _ in self.layers],
                       v=[torch.zeros(kv, dtype=self.dtype, device=dev) for _ in self.layers],
                       tok=torch.zeros(rows, **long), pos=torch.zeros(rows, **long),
                       cur=torch.zeros(1, **long), step=torch.zeros(1, **long),
                       min_new=torch.zeros(1, **long), limit=torch.zeros(rows, **long),
                       valid=torch.zeros(rows, length, dtype=torch.bool, device=dev),
                       presence=torch.zeros(rows, self.vocab, dtype=torch.bool, device=dev),
                       done=torch.zeros(rows, dtype=torch.bool, device=dev),
                       out=torch.full((rows, length), self.pad, **long))
        self._buffers[rows] = buf
        return buf

    def _drop(self, rows: int) -> None:
        if self._left is not None and self._left.buf is self._buffers.get(rows):
            self._left = None
        self._buffers.pop(rows, None)
        for key in [k for k in self._graphs if k[0] == rows]:
            del self._graphs[key]

    def _graph(self, buf: _Buffers, length: int, *, on_request: bool) -> Any:
        """The captured decode step for (rows, length): recorded after warm-up runs on a
        side stream, as capture requires. The state it scribbles on is reset before use."""
        import torch

        key = (buf.rows, length)
        if key in self._graphs:
            return self._graphs[key]
        try:
            if not self.use_graphs:  # CPU: the same flow, the step replayed eagerly
                if on_request:  # (ahead of time, prepare only registers it: nothing to warm)
                    self._park(buf, length)
                    self._step(buf, length)
                self._graphs[key] = _EagerStep(self, buf, length)
                self.stats["captured_on_request"] += int(on_request)
                return self._graphs[key]
            with torch.cuda.device(self.device):  # capture on the model's GPU, not cuda:0
                return self._capture(buf, length, key, on_request)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 — a speed-up must never cost the answer
            return self._degrade(buf, length, key, on_request, exc)

    def _degrade(self, buf: _Buffers, length: int, key: tuple, on_request: bool,
                 exc: Exception) -> Any:
        """Compilation failed (no C compiler for Triton, an inductor bug, …): carry on with
        the plain step functions. Capture failed with them too: replay the step eagerly."""
        if self.compiled:
            log.warning("compiling the decode step failed (%s: %s); decoding without "
                        "torch.compile", type(exc).__name__, exc)
            self._one_row, self._rows = step.functions(False)
            self.compiled = False
            self._graphs.clear()
            return self._graph(buf, length, on_request=on_request)
        if not self.use_graphs:  # the plain eager step itself fails: a real error
            raise exc
        log.warning("capturing the decode step failed (%s: %s); replaying it eagerly",
                    type(exc).__name__, exc)
        self.use_graphs = False
        self._graphs.clear()
        return self._graph(buf, length, on_request=on_request)

    def _capture(self, buf: _Buffers, length: int, key: tuple, on_request: bool) -> Any:
        import torch

        t0 = time.perf_counter()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            # eager steps first: lazy initialisation and any compilation happen here, never
            # inside the capture (twice for the first graph of the process, once after)
            for _ in range(1 if self.stats["graphs"] else 2):
                self._park(buf, length)
                self._step(buf, length)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        self._park(buf, length)
        # an explicit stream: torch's default capture stream lives on the GPU that was
        # current when the first graph of the process was captured
        with torch.cuda.graph(graph, pool=self._pool, stream=stream):
            self._step(buf, length)
        self._graphs[key] = graph
        self.stats["graphs"] += 1
        self.stats["capture_s"] += time.perf_counter() - t0
        self.stats["captured_on_request"] += int(on_request)
        log.info("captured the decode step for %d rows, cache %d in %.2f s%s", buf.rows,
                 length, time.perf_counter() - t0, " (during a request)" if on_request else "")
        return graph

    @staticmethod
    def _park(buf: _Buffers, length: int) -> None:
        """A harmless state for warm-up/capture steps: write the last cache slot."""
        buf.cur.fill_(length - 1)
        buf.step.zero_()
        buf.valid[:, 0] = True

    @staticmethod
    def _force(buf: _Buffers, ids, path) -> None:
        """Teacher forcing: the next input is the path's last token, and the penalty sees
        the prompt plus the path (not the model's own choices); no row is finished."""
        b = ids.shape[0]
        buf.tok[:b].copy_(path[:, -1])
        buf.done[:b] = False
        buf.presence[:b] = False
        buf.presence[:b].scatter_(1, ids, True)
        buf.presence[:b].scatter_(1, path, True)

    def _load_state(self, buf: _Buffers, parts: list[_Prefilled], p: int, max_new,
                    min_new) -> None:
        """Copy the prefills' caches into the buffers and reset the decode state in place.
        Each part's rows follow the last's; its prompt (left-padded to its own length) fills
        positions from 0, and positions up to ``p`` (the longest part's) stay masked, so
        every row decodes from cache index ``p`` at its own rotary position. Spare rows
        (batch padded up to the graph's size) start finished."""
        buf.valid.zero_()
        buf.pos.zero_()
        buf.presence.zero_()
        r = 0
        for part in parts:
            b, n = part.ids.shape
            layers = getattr(part.cache, "layers", None)
            for i in range(len(self.layers)):
                k = layers[i].keys if layers is not None else part.cache.key_cache[i]
                v = layers[i].values if layers is not None else part.cache.value_cache[i]
                buf.k[i][r:r + b, :, :n].copy_(k)
                buf.v[i][r:r + b, :, :n].copy_(v)
            buf.valid[r:r + b, :n].copy_(part.mask.bool())
            # the next token's rotary position: one past the last real prompt position
            buf.pos[r:r + b].copy_(part.mask.long().sum(-1) + part.deltas)
            buf.presence[r:r + b].scatter_(1, part.ids, True)
            r += b
        buf.valid[r:, 0] = True
        buf.cur.fill_(p)
        buf.step.zero_()
        buf.min_new.fill_(min(min_new or 0, max_new))
        buf.limit.fill_(max_new)
        buf.done.zero_()
        buf.done[r:] = True
        buf.out.fill_(self.pad)
        buf.tok.fill_(self.pad)

    def _select(self, logits, buf: _Buffers):
        """Greedy choice with the generation config's processors, all on the device."""
        return step.choose(logits, buf.presence, buf.step, buf.min_new, buf.done, self.eos,
                           self.penalty, self.pad)

    def _advance(self, buf: _Buffers, nxt) -> None:
        rows = nxt.shape[0]
        buf.out.index_copy_(1, buf.step.clamp_max(buf.cap - 1), nxt.view(rows, 1))
        ended = buf.step + 1 >= buf.limit
        if self.eos is not None:
            ended = ended | (nxt.view(rows, 1) == self.eos.view(1, -1)).any(-1)
        buf.done |= ended
        buf.presence.scatter_(1, nxt.view(rows, 1), True)
        buf.tok.copy_(nxt)
        buf.step.add_(1)

    def _step(self, buf: _Buffers, length: int) -> None:
        """One decode step for every row: embed → layers → norm → lm_head → select. Reads
        the first ``length`` cache positions."""
        fn, x = self._hidden(buf, length)
        nxt = fn.head(self.model.lm_head, x, buf.presence, buf.step, buf.min_new, buf.done,
                      self.eos, self.penalty, self.pad)
        buf.pos.add_(1)
        buf.cur.add_(1)
        self._advance(buf, nxt)

    def _hidden(self, buf: _Buffers, length: int) -> tuple[Any, Any]:
        """Embed ``buf.tok``, write its keys and values at cache index ``buf.cur`` (every row
        attends to it) and run the layers: (the step functions, the final normed hidden
        state [rows, 1, H])."""
        rows = buf.rows
        fn = self._one_row if rows == 1 else self._rows
        h = self.text.embed_tokens(buf.tok.view(rows, 1))
        cos, sin = self.text.rotary_emb(h, buf.pos.view(1, rows, 1).expand(3, rows, 1))
        buf.valid.index_fill_(1, buf.cur, True)
        mask = buf.valid[:, :length].view(rows, 1, 1, length)
        x = self.layers[0].input_layernorm(h)  # each layer normalises the next one's input
        for i, layer in enumerate(self.layers):
            qkv_w, qkv_b, sizes, gate_up_w = self._fused[i]
            h, x = fn.layer(layer, h, x, buf.k[i], buf.v[i], buf.cur, cos, sin, mask, self.rope,
                            self.head_dim, self.n_kv, qkv_w, qkv_b, sizes, gate_up_w,
                            self._next_norm[i])
        return fn, x
