"""Several describe requests through one generate call: ``describe_many(engine, …)``, which
``Engine.describe_many`` calls.

A worker hands the engine the describe jobs queued on it; their frames are read on a small
thread pool (the next clips' while the GPU works), requests with the same output settings
share one batch, and each request still gets its own Result — or its own error: a bad file
fails only its entry. A batch streams: its clips are prefilled ``PREFILL_PART`` at a time as
their frames arrive and all its rows decode together (``FastDecoder.generate`` with parts),
so the GPU starts after the first part's reads, not the whole batch's. Without a batch size
it is the memory planner's (``planned_batch``). Out of memory splits the batch in halves; a
single clip that still does not fit takes ``Engine.analyze``'s path, which lowers its
resolution and says so in the result.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from chord_core.analysis.request import AnalysisRequest, build_result
from chord_core.threads import Pool
from chord_core.types import ProgressEvent, Result, SamplingPlan, Timing, VideoInfo

if TYPE_CHECKING:
    from chord_core.analysis.engine import Engine
    from chord_core.errors import ChordError
    from chord_core.model.loading import LoadedModel

log = logging.getLogger(__name__)

DESCRIBE_BATCH = 8  # clips per generate call on the CPU (and before the first clip is read)
PROMPT_TEXT_TOKENS = 512  # the chat template and the prompt's text, beside the visual tokens
PREFILL_PART = 8  # clips a prefill takes at a time; a decode batch may hold several parts


def describe_many(engine: Engine, requests: Sequence[AnalysisRequest], *,
                  infos: Sequence[VideoInfo | None] | None = None,
                  plans: Sequence[SamplingPlan | None] | None = None,
                  batch_size: int | None = None,
                  on_progress: Callable[[int, ProgressEvent], None] | None = None,
                  cancel: threading.Event | None = None) -> list[Result | ChordError]:
    """Describe several clips, generating up to ``batch_size`` of them in one batch while
    a thread pool reads the next clips' frames. Returns one Result — or the ChordError
    that clip raised — per request, in order: a bad file fails only its own entry.
    Requests that are not plain describes (grounding, annotated video) run one by one.
    ``batch_size`` None: as many clips as the GPU's memory holds (``planned_batch``, from
    the first clip read), ``DESCRIBE_BATCH`` on the CPU."""
    import os

    from chord_core.errors import ChordError, ConfigError

    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"describe batch size must be ≥ 1, got {batch_size}",
                          hint="leave it unset (as many clips as the GPU holds) or use e.g. 8")
    n, lm = len(requests), engine.load()
    results: list[Result | ChordError | None] = [None] * n
    batched = [i for i, r in enumerate(requests)
               if r.task == "describe" and not r.annotated_video]
    for i in sorted(set(range(n)) - set(batched)):
        results[i] = _analyze_one(engine, requests[i], i, on_progress, cancel, infos, plans)

    def prep(i: int) -> Any:
        try:
            return _prepare_describe(engine, requests[i], _at(infos, i), _at(plans, i),
                                          cancel)
        except ChordError as exc:
            return exc

    size = batch_size
    # readers: a clip's decode is mostly FFmpeg's (the GIL released); a quarter of the cores
    # shortens the wait for the first part's frames, the only read not hidden behind the GPU
    readers = max(2, min(8, (os.cpu_count() or 2) // 4))
    with Pool(readers, thread_name_prefix="chord-read") as pool:
        futures: list[Any] = []
        taken = [0]  # clips handed to a batch so far

        def take() -> tuple[int, Any] | None:  # the next clip read (its error), or None
            pos = taken[0]
            if pos >= len(batched):
                return None
            while len(futures) < len(batched) and \
                    len(futures) - pos < 2 * (size or DESCRIBE_BATCH):  # frames read ahead
                futures.append(pool.submit(prep, batched[len(futures)]))
            item = futures[pos].result()
            futures[pos] = None  # frames go once used
            taken[0] += 1
            return batched[pos], item

        while taken[0] < len(batched):
            ready: list = []     # this batch's clips, in order
            deferred: list = []  # clips with other output settings: their own batch after

            def fill(ready: list, deferred: list) -> Any:  # the batch's clips as read, in parts
                nonlocal size
                part: list = []
                while len(ready) + len(deferred) < (size or DESCRIBE_BATCH):
                    got = take()
                    if got is None:
                        break
                    i, item = got
                    if isinstance(item, ChordError):
                        results[i] = item
                        continue
                    if ready and _key(requests[i]) != _key(requests[ready[0][0]]):
                        deferred.append((i, item))
                        continue
                    if size is None:
                        size = planned_batch(lm, item["plan"].visual_tokens,
                                             requests[i].max_new_tokens)
                    ready.append((i, item))
                    part.append((i, item))
                    if len(part) == PREFILL_PART:
                        yield part
                        part = []
                if part:
                    yield part

            _describe_stream(engine, lm, requests, ready, fill(ready, deferred), results,
                             on_progress, cancel)
            groups: dict[tuple, list] = {}
            for i, item in deferred:  # one batch per output-length setting
                groups.setdefault(_key(requests[i]), []).append((i, item))
            for group in groups.values():
                _describe_ready(engine, lm, requests, group, results, on_progress, cancel)
    return results  # type: ignore[return-value]

def _analyze_one(engine: Engine, request, i, on_progress, cancel, infos, plans) -> Result | Exception:
    from chord_core.errors import ChordError

    try:
        return engine.analyze(request, cancel=cancel, info=_at(infos, i),
                            sampling_plan=_at(plans, i), on_progress=None if on_progress
                            is None else (lambda ev: on_progress(i, ev)))
    except ChordError as exc:
        return exc

def _prepare_describe(engine: Engine, request: AnalysisRequest, info: VideoInfo | None,
                      plan: SamplingPlan | None, cancel: threading.Event | None) -> dict:
    from chord_core.media.probe import probe
    from chord_core.media.sampling import plan_sampling

    t0 = time.perf_counter()
    probe_s = 0.0
    if info is None:
        info = probe(request.video_path)
        probe_s = time.perf_counter() - t0
    plan = plan or plan_sampling(info, request.task, request.sampling)
    frames, plan, warnings, decode_s = engine.read_frames(info, plan, cancel=cancel,
                                                          on_device=True)
    return {"info": info, "plan": plan, "frames": frames, "warnings": warnings,
            "probe_s": probe_s, "decode_s": decode_s, "t0": t0}

def _key(request: AnalysisRequest) -> tuple:
    """Requests that can share a generate call: the same output-length settings."""
    return (request.max_new_tokens, request.min_new_tokens)


def _clips(requests: Sequence[AnalysisRequest], items: list) -> list:
    """(frames, metadata, prompt) of prepared clips, as the model's inputs take them."""
    from chord_core.media.sampling import video_metadata
    from chord_core.model.prompts import DEFAULT_DESCRIBE_PROMPT

    return [(it["frames"], {**video_metadata(it["info"], it["plan"].frame_indices),
                            "timestamps_s": list(it["plan"].timestamps_s)},
             requests[i].query.strip() or DEFAULT_DESCRIBE_PROMPT) for i, it in items]


def _generating(on_progress: Any, items: list, what: str) -> None:
    for i, _ in items:
        if on_progress is not None:
            on_progress(i, ProgressEvent("generating", what, 0, 1, 0.0))


def _describe_stream(engine: Engine, lm: LoadedModel, requests: Sequence[AnalysisRequest],
                     ready: list, parts: Any, results: list, on_progress: Any,
                     cancel: threading.Event | None) -> None:
    """One batch whose clips arrive in parts (``parts`` appends each to ``ready`` as it
    yields it): each part's inputs are built and prefilled while the next part's frames
    are still being read, then all rows decode together (``FastDecoder.generate`` with
    parts). A failure reads the rest of the batch and recovers as ``_describe_ready``
    does (halves; one clip out of memory takes ``analyze``'s path)."""
    import torch

    from chord_core.errors import ChordError

    first = next(parts, None)
    if first is None:
        return
    req = requests[first[0][0]]

    def all_parts() -> Any:
        yield first
        for part in parts:  # not ``yield from``: closing this generator (a failed call's
            yield part      # frames freed) must not close ``parts``, read to its end below

    def clip_parts() -> Any:
        for part in all_parts():
            yield _clips(requests, part)
        # every part prefilled: the batch is whole, and decodes next
        _generating(on_progress, ready, f"describing in a batch of {len(ready)}")

    try:
        engine.raise_injected_oom()
        outs = describe_parts(lm, clip_parts(), req.max_new_tokens,
                              min_new_tokens=req.min_new_tokens, cancel=cancel)
    except (ChordError, torch.cuda.OutOfMemoryError) as exc:
        # without its traceback: its frames hold the failed call's prefill caches
        failed: BaseException = exc.with_traceback(None)
    else:
        _store(lm, requests, ready, outs, results)
        return
    for _ in parts:  # every clip of the batch read, so the recovery sees them all
        pass
    _recover(engine, lm, requests, ready, results, on_progress, cancel, failed)


def describe_parts(lm: LoadedModel, parts: Any, max_new_tokens: int, *,
                   min_new_tokens: int | None = None,
                   cancel: threading.Event | None = None) -> list:
    """``loading.describe_batch`` for clips that come in parts (an iterable of clip lists):
    with the fast decoder each part's inputs are built when the decoder asks for them, after
    the previous part's prefill was launched, and every row decodes in one batch. Times are
    each clip's share; inputs built inside the generate call count as preprocessing."""
    from chord_core.model import loading as m

    if lm.decoder is None:  # transformers' generate: one processor output
        return m.describe_batch(lm, [c for part in parts for c in part], max_new_tokens,
                                min_new_tokens=min_new_tokens, cancel=cancel)
    masks: list = []
    built = [0.0]

    def inputs() -> Any:
        for clips in parts:
            m._raise_if_cancelled(cancel)
            t0 = time.perf_counter()
            x = m.build_video_batch(lm, clips)
            masks.extend(x["attention_mask"])  # host copies: read without a device sync
            x = x.to(lm.input_device)
            built[0] += time.perf_counter() - t0
            yield x

    new_ids, seconds = m._generate(lm, inputs(), max_new_tokens, min_new_tokens, cancel)
    texts = lm.processor.batch_decode(new_ids, skip_special_tokens=True)
    stop, n = m._stop_ids(lm), len(new_ids)
    gen_s = max(0.0, seconds - built[0])
    return [m.GenerationOutput(text=text.strip(), prompt_tokens=int(mask.sum()),
                               new_tokens=m._count_new(row, stop), preprocess_s=built[0] / n,
                               generate_s=gen_s / n)
            for text, mask, row in zip(texts, masks, new_ids)]


def _describe_ready(engine: Engine, lm: LoadedModel, requests: Sequence[AnalysisRequest],
                    ready: list, results: list, on_progress: Any,
                    cancel: threading.Event | None) -> None:
    """Generate for prepared clips in one batch; on out-of-memory split the batch in
    halves, and a single clip that still does not fit takes ``analyze``'s path (which
    lowers its resolution and says so)."""
    import torch

    from chord_core.errors import ChordError
    from chord_core.model import loading as m

    _generating(on_progress, ready, f"describing in a batch of {len(ready)}")
    first = requests[ready[0][0]]
    try:
        engine.raise_injected_oom()
        outs = m.describe_batch(lm, _clips(requests, ready), first.max_new_tokens,
                                min_new_tokens=first.min_new_tokens, cancel=cancel)
    except (ChordError, torch.cuda.OutOfMemoryError) as exc:
        failed: BaseException = exc.with_traceback(None)  # (frames holding GPU memory)
    else:
        _store(lm, requests, ready, outs, results)
        return
    _recover(engine, lm, requests, ready, results, on_progress, cancel, failed)


def _recover(engine: Engine, lm: LoadedModel, requests: Sequence[AnalysisRequest],
             ready: list, results: list, on_progress: Any, cancel: threading.Event | None,
             exc: BaseException) -> None:
    """After a batch failed: a clip's own error (ChordError) is found by halving; out of
    memory splits the batch in halves, and a single clip takes ``analyze``'s path."""
    from chord_core.errors import ChordError

    def halves() -> None:
        half = len(ready) // 2
        for part in (ready[:half], ready[half:]):
            _describe_ready(engine, lm, requests, part, results, on_progress, cancel)

    if isinstance(exc, ChordError):  # one clip's fault: halve until it is found
        if len(ready) == 1:
            results[ready[0][0]] = exc
        else:
            halves()
        return
    from chord_core.model.loading import release_memory

    release_memory()
    if len(ready) == 1:  # the single-clip path degrades resolution on OOM
        i, it = ready[0]
        results[i] = _analyze_one(engine, requests[i], i, on_progress, cancel,
                                  {i: it["info"]}, {i: it["plan"]})
    else:
        log.warning("out of GPU memory describing %d clips at once; splitting the "
                    "batch", len(ready))
        halves()


def _store(lm: LoadedModel, requests: Sequence[AnalysisRequest], ready: list, outs: list,
           results: list) -> None:
    for (i, it), out in zip(ready, outs):
        req = requests[i]
        timing = Timing(probe_s=it["probe_s"], load_s=0.0, decode_s=it["decode_s"],
                        preprocess_s=out.preprocess_s, generate_s=out.generate_s,
                        total_s=time.perf_counter() - it["t0"])
        results[i] = build_result(req, it["info"], it["plan"], lm.info, timing,
                                  it["warnings"], text=out.text, raw_outputs=(out.text,),
                                  tokens={"prompt": out.prompt_tokens,
                                          "completion": out.new_tokens})


def planned_batch(lm: LoadedModel, visual_tokens: int, new_tokens: int) -> int:
    """Clips per describe batch for clips like this one (``visual_tokens``, ``new_tokens``)
    on ``lm``'s device: ``planner.describe_batch_size`` on the memory free there now —
    each clip's prefill cache (held until the decode), its pixels (float32) and the vision
    tower's and language model's prefill activations (one part of ``PREFILL_PART`` clips at
    a time), and a decode buffer row at the cache length the batch needs.
    ``DESCRIBE_BATCH`` on the CPU, where memory is not what limits a batch."""
    device = str(lm.input_device)
    if not device.startswith("cuda"):
        return DESCRIBE_BATCH
    import torch

    from chord_core.model import planner
    from chord_core.model.fastgen import SPARE_SLOTS, length_bucket

    cfg = lm.model.config
    text, vision = cfg.get_text_config(), getattr(cfg, "vision_config", None)
    elem = next(lm.model.parameters()).element_size()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_token = 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * elem
    prompt = visual_tokens + PROMPT_TEXT_TOKENS
    length = length_bucket(prompt + new_tokens) + SPARE_SLOTS
    patches = visual_tokens * int(getattr(vision, "spatial_merge_size", 2)) ** 2
    v_hidden = int(getattr(vision, "hidden_size", 0) or getattr(vision, "embed_dim", 0))
    v_inter = int(getattr(vision, "intermediate_size", 0) or 4 * v_hidden)
    pixels = 3 * int(getattr(vision, "temporal_patch_size", 2)) * \
        int(getattr(vision, "patch_size", 14)) ** 2  # float32 values a patch
    clip = kv_token * prompt  # the prefill's cache, held until the decode starts
    part = (prompt * (4 * text.hidden_size + 3 * text.intermediate_size) * elem
            + patches * ((4 * v_hidden + 3 * v_inter) * elem + 4 * pixels))  # while prefilled
    free = torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - \
        torch.cuda.memory_allocated(device)  # the allocator's cached blocks are free too
    held = lm.decoder.held_rows(length) if lm.decoder is not None else []
    size = planner.describe_batch_size(clip, kv_token * length, free, part_bytes=part,
                                       part=PREFILL_PART, held_rows=held)
    log.info("describe batches of %d clips (≈ %.2f GiB a clip, %.1f GiB free)", size,
             (clip + part + kv_token * length) / 2**30, free / 2**30)
    return size


def _at(seq: Any, i: int) -> Any:
    """``seq[i]`` for a list, or a dict keyed by position; None when absent."""
    if seq is None:
        return None
    if isinstance(seq, dict):
        return seq.get(i)
    return seq[i] if i < len(seq) else None
