"""Warm-up: what a worker runs before (or, with ``CHORD_WARMUP=lazy``, beside) its first
request, so that no request at the default settings compiles or captures anything.

    decode graphs, one step per row count  ─▶  describe (2 frames)  ─▶  ground (2 images)
                                                ─▶  entail (2 pairs scored)

Only for the tasks the process serves (``CHORD_WARMUP_TASKS``, ``serve --warmup-tasks``;
default all three): a task left out costs no graph, buffer or step, and captures what it
needs on its first request. The first capture of each kind compiles the decode step (batch
1, then batches); the tiny requests then pay the vision tower's and the prefill's first run,
kernel selection and allocator growth, and capture nothing. The decode graphs are captured
for every (rows, cache length) a request of a served task can reach with the defaults:

* rows: 1 (``analyze``: one clip, one grounding image) and every padded size of a batch up
  to ``max(DESCRIBE_BATCH, batch_size)`` for describe (``describe_many``), up to
  ``batch_size`` for per-frame grounding, plus the entailment batch when the model reasons
  first (a Thinking checkpoint decodes there; plain entailment only scores);
* length: prompt + answer tokens of the longest such request — for describe the sampling
  plan's visual token budget plus the prompt's text plus the default answer length, for
  grounding one image at its pixel cap plus a box list — on the ladder of
  ``fastgen.length_bucket``.

The decode buffers of every row count are held for the worker's life; they get at most
``KV_SHARE`` of the memory left after loading, shared between the row counts (a count that
does not fit its share is captured up to a shorter length; a longer request captures its own
graph then, logged). Each step is separate (``warmup_steps``) so a worker can report which one
it is on and, warming in the background, take a request between two of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from chord_core.analysis.describe_batch import DESCRIBE_BATCH
from chord_core.analysis.request import TASKS
from chord_core.config import MAX_NEW_TOKENS_DEFAULT, PATCH_PX, SamplingConfig

if TYPE_CHECKING:
    from chord_core.analysis.engine import Engine
    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

PROMPT_TEXT_TOKENS = 512  # the chat template, the task's instructions and the user's text
GROUND_NEW_TOKENS = 256   # ground_images' default answer length
KV_SHARE = 0.35           # of the memory free after loading, for all decode buffers
StepFn = Callable[[Callable[[int, int], None] | None], None]


@dataclass(frozen=True)
class WarmStep:
    """One warm-up step: ``name`` (the key of its seconds), what it does, and the call
    (given an ``on_count(done, total)`` for steps made of several captures)."""

    name: str
    detail: str
    run: StepFn


def graph_plan(lm: LoadedModel, batch_size: int, sampling: SamplingConfig | None = None,
               free_bytes: int | None = None, tasks: Sequence[str] = TASKS
               ) -> dict[int, int]:
    """Rows → the cache length to capture decode graphs up to, for the requests of ``tasks``
    (see the module docstring): describe's one clip and describe_many's batches, grounding's
    image batches, a Thinking model's entailment batch; plain entailment only scores (no
    decode step: nothing to capture)."""
    from chord_core.model.fastgen import batch_bucket, length_bucket

    sampling = sampling or SamplingConfig()
    longest = sampling.token_budget + PROMPT_TEXT_TOKENS + MAX_NEW_TOKENS_DEFAULT
    ground = sampling.ground_max_pixels // (PATCH_PX * PATCH_PX) + PROMPT_TEXT_TOKENS + \
        GROUND_NEW_TOKENS
    want: dict[int, int] = {}

    def need(top: int, length: int, one_row: bool = True) -> None:
        rows = {batch_bucket(b) for b in range(2, top + 1)} | ({1} if one_row else set())
        for r in rows:
            want[r] = max(want.get(r, 0), length)

    if "describe" in tasks:  # analyze: one clip; describe_many: batches of clips
        need(max(DESCRIBE_BATCH, batch_size), longest)
    if "ground" in tasks:  # one grounding image, or per-frame batches of batch_size
        need(batch_size, ground)
    if "entail" in tasks and getattr(lm.info, "thinking", False):
        _need_think(want, batch_size)  # a Thinking model reasons (decodes) in its batches
    return _fit(lm, {r: length_bucket(n) for r, n in want.items()}, free_bytes)


def _need_think(want: dict[int, int], batch_size: int) -> None:
    from chord_core.analysis.entail_batch import MIN_BATCH
    from chord_core.analysis.entail_think import RESERVE, THINK_TOKENS_DEFAULT
    from chord_core.media.sampling import ENTAIL_MAX_PIXELS
    from chord_core.model.fastgen import batch_bucket

    # + the slots kept for the closing that scores the answer from the reasoning's cache
    think = ENTAIL_MAX_PIXELS // (PATCH_PX * PATCH_PX) + PROMPT_TEXT_TOKENS + \
        THINK_TOKENS_DEFAULT + RESERVE
    rows = batch_bucket(max(batch_size, MIN_BATCH))
    want[rows] = max(want.get(rows, 0), think)


def _fit(lm: LoadedModel, want: dict[int, int], free_bytes: int | None) -> dict[int, int]:
    """Shorten the lengths, largest row count first, until all buffers fit the share."""
    from chord_core.model.fastgen import _LADDER, SPARE_SLOTS

    budget = KV_SHARE * (free_bytes if free_bytes is not None else _free_bytes(lm))
    per_token = lm.decoder.kv_bytes(1, 1)
    plan = dict(want)

    def need() -> int:
        return sum(r * (n + SPARE_SLOTS) * per_token for r, n in plan.items())

    for rows in sorted(plan, reverse=True):
        while need() > budget and plan[rows] > _LADDER[0]:
            plan[rows] = max([x for x in _LADDER if x < plan[rows]] or [_LADDER[0]])
    if plan != want:
        log.info("decode graphs up to %s positions (rows: length), not %s: the buffers get "
                 "%.1f GiB (%.0f%% of the free memory)", plan, want, budget / 2**30,
                 100 * KV_SHARE)
    return plan


def _free_bytes(lm: LoadedModel) -> int:
    import os

    import torch

    dev = lm.decoder.device
    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def warmup_steps(engine: Engine, lm: LoadedModel, tasks: Sequence[str] = TASKS
                 ) -> list[WarmStep]:
    """The warm-up of ``engine``'s loaded model for the requests of ``tasks``, step by step:
    the decode graphs they reach (``graph_plan``), then one tiny request of each task."""
    import numpy as np

    frames = np.full((2, 252, 448, 3), 127, dtype=np.uint8)
    batch = engine.model_cfg.batch_size
    steps: list[WarmStep] = []
    if lm.decoder is not None:  # graphs first: the tiny requests below then capture nothing
        for i, (rows, length) in enumerate(sorted(graph_plan(lm, batch, tasks=tasks).items())):
            first = " (compiles the decode step)" if i < 2 else ""
            steps.append(WarmStep(f"graphs_{rows}_s", f"capturing decode graphs: {rows} "
                                  f"row(s) up to {length:,} positions{first}",
                                  _capture(lm, rows, length)))
    tiny = {"describe": ("describe_s", "warm-up: a tiny describe (vision tower, prefill)",
                         _describe(lm, frames)),
            "ground": ("ground_s", "warm-up: a tiny grounding batch",
                       _ground(lm, frames, batch)),
            "entail": ("entail_s", "warm-up: a tiny entailment pass (vision tower, scoring)",
                       _entail(lm, frames, batch))}
    return steps + [WarmStep(*tiny[t]) for t in TASKS if t in tasks]


def _describe(lm: LoadedModel, frames: Any) -> StepFn:
    from chord_core.model import loading as m

    meta = {"total_num_frames": 2, "fps": 2.0, "frames_indices": [0, 1], "duration": 1.0}

    def run(_: Any) -> None:
        m.describe(lm, frames, meta, "warm-up", 8)
    return run


def _ground(lm: LoadedModel, frames: Any, batch: int) -> StepFn:
    from chord_core.model import loading as m

    def run(_: Any) -> None:
        m.ground_images(lm, [frames[0]] * min(2, batch), "warm-up", batch_size=batch,
                        max_new_tokens=8)
    return run


def _entail(lm: LoadedModel, frames: Any, batch: int) -> StepFn:
    """Two pairs scored; a Thinking model's reasoning batch is as wide as its graphs."""
    from chord_core.analysis.entail_batch import MIN_BATCH
    from chord_core.analysis.entailment import score_images

    n = max(batch, MIN_BATCH) if getattr(lm.info, "thinking", False) else 2

    def run(_: Any) -> None:
        score_images(lm, [frames[0]] * n, ["warm-up"] * n, batch_size=n, think_tokens=8)
    return run


def _capture(lm: LoadedModel, rows: int, length: int) -> StepFn:
    def run(on_count: Callable[[int, int], None] | None) -> None:
        with lm.lock:
            lm.decoder.prepare((rows,), length, on_graph=on_count)
    return run


OnStep = Callable[[str, "int | None", "int | None"], None]


def run_warmup(engine: Engine, on_step: OnStep | None = None,
               tasks: Sequence[str] = TASKS) -> dict[str, float]:
    """Every step of the warm-up for ``tasks``; seconds per step (``total_s`` for all), the
    graphs and the compile cache's hits and misses. ``on_step(detail, done, total)`` as it
    goes (done and total count a step's captures; None at a step's start)."""
    from chord_core.model import loading as m

    lm = engine.load()
    laps = m.Laps()
    steps = warmup_steps(engine, lm, tasks)
    for i, step in enumerate(steps):
        if on_step is not None:
            on_step(f"{step.detail} (step {i + 1}/{len(steps)})", None, None)
        step.run(_counter(on_step, step.detail))
        laps.lap(step.name)
    out = dict(laps.steps)
    out.update(finish_stats(lm))
    out["total_s"] = laps.total()
    return out


def _counter(on_step: OnStep | None, detail: str) -> Callable[[int, int], None] | None:
    if on_step is None:
        return None
    return lambda done, total: on_step(detail, done, total) if done % 4 == 0 or done == total \
        else None


def finish_stats(lm: LoadedModel) -> dict[str, float]:
    """The decoder's graph count and what compiling cost (cache hits and misses)."""
    out: dict[str, Any] = {}
    if lm.decoder is not None:
        out["graphs"] = float(lm.decoder.stats["graphs"])
        out["graphs_captured_on_request"] = float(lm.decoder.stats["captured_on_request"])
        if lm.decoder.compiled:
            from chord_core.model.decode_step import compile_stats

            out.update(compile_stats())
    return out
