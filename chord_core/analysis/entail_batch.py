"""Many entailment requests in one scoring pass: the frames of every request (one each for
the service's images) go through the model together, ``batch_size`` pairs per forward pass.
Reader threads decode the requests' frames ahead, and the next pass's inputs are built while
the model runs this one (``entailment.score_batches``), so the GPU does not wait for the CPU;
a call of one pass is cut in two (``pass_size``) so that this overlap exists at all. A request
whose file is bad fails alone."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from chord_core.analysis.request import build_result
from chord_core.errors import ChordError
from chord_core.threads import Pool
from chord_core.types import Result, Timing

if TYPE_CHECKING:
    from chord_core.analysis.engine import Engine
    from chord_core.analysis.request import AnalysisRequest

log = logging.getLogger(__name__)

# threads reading (decoding: Pillow lets go of the interpreter lock) the requests' frames
# ahead of the model: 4, up to 8 where the machine has the cores
READERS = max(4, min(8, (os.cpu_count() or 4) // 2))
MIN_BATCH = 32  # pairs per forward pass at least, whatever batch_size (one pair: ~300 tokens)
MIN_SPLIT = 8   # a call of one pass is cut in two when each half has at least this many pairs


def entail_many(engine: Engine, requests: Sequence[AnalysisRequest], *,
                infos: Sequence[Any] | None = None, plans: Sequence[Any] | None = None,
                cancel: threading.Event | None = None) -> list[Result | Exception]:
    """One Result (or the ChordError that request raised) per request, in order."""
    from chord_core.analysis.entailment import clean_statement

    lm = engine.load()
    results: list[Result | Exception | None] = [None] * len(requests)

    def prep(i: int) -> dict | ChordError:
        try:
            t0 = time.perf_counter()
            req = requests[i]
            info, plan, probe_s = _planned(req, infos, plans, i)
            frames, plan, warnings, decode_s = engine.read_frames(info, plan, cancel=cancel)
            return {"t0": t0, "info": info, "plan": plan, "frames": frames,
                    "statement": clean_statement(req.query), "warnings": warnings,
                    "think": req.max_new_tokens,
                    "probe_s": probe_s, "decode_s": decode_s}
        except ChordError as exc:
            return exc

    ready: list[tuple[int, dict]] = []
    batch = max(engine.model_cfg.batch_size, MIN_BATCH)
    if not getattr(lm.info, "thinking", False):  # its reasoning runs on graphs of `batch` rows
        batch = pass_size(_pairs(requests, plans), batch)
    with Pool(READERS, thread_name_prefix="chord-entail-read") as pool:
        pending = [pool.submit(prep, i) for i in range(len(requests))]

        def batches() -> Iterator[tuple[list, list, list]]:
            """Frames in request order, ``batch`` at a time, as the readers deliver them
            (the scorer pulls these on its input thread while the model runs), with each
            row's statement and reasoning budget (its request's ``max_new_tokens``)."""
            rows: list[list] = [[], [], []]
            for i, fut in enumerate(pending):
                it = fut.result()
                if not isinstance(it, dict):
                    results[i] = it
                    continue
                ready.append((i, it))
                k = len(it["frames"])
                rows[0].extend(it["frames"])
                rows[1].extend([it["statement"]] * k)
                rows[2].extend([it["think"]] * k)
                while len(rows[0]) >= batch:
                    yield rows[0][:batch], rows[1][:batch], rows[2][:batch]
                    rows = [r[batch:] for r in rows]
            if rows[0]:
                yield rows[0], rows[1], rows[2]

        try:
            bodies = _score(lm, ready, batches(), cancel)
        finally:
            for fut in pending:
                fut.cancel()
    for (i, it), body in zip(ready, bodies):
        timing = Timing(probe_s=it["probe_s"], load_s=0.0, decode_s=it["decode_s"],
                        preprocess_s=body.pop("preprocess_s"),
                        generate_s=body.pop("generate_s"),
                        total_s=time.perf_counter() - it["t0"])
        results[i] = build_result(requests[i], it["info"], it["plan"], lm.info, timing,
                                  tuple(it["warnings"]) + tuple(body.pop("warnings", ())),
                                  **body)
    return results  # type: ignore[return-value]


def pass_size(pairs: int, batch: int) -> int:
    """Pairs per forward pass for a call of ``pairs``: ``batch``, except that a call that
    fits one pass (a ``/batch_predict`` request of 32 tasks) is scored in two halves, so the
    first half's pass starts once its images are read, and the second half is read and its
    inputs built while that pass runs, instead of every image read before any pass."""
    if pairs > batch or pairs < 2 * MIN_SPLIT:
        return batch
    return -(-pairs // 2)


def _pairs(requests: Sequence[AnalysisRequest], plans: Sequence[Any] | None) -> int:
    """The call's pairs: each request's planned frames, one for an unplanned image; a call
    holding an unplanned clip (frames not known yet) counts as more than any pass."""
    from chord_core.media.images import is_image_path

    total = 0
    for i, req in enumerate(requests):
        plan = plans[i] if plans is not None and i < len(plans) else None
        if plan is not None:
            total += max(1, int(plan.num_frames))
        elif is_image_path(req.video_path):
            total += 1
        else:
            return 1 << 30
    return total


def _planned(req: AnalysisRequest, infos: Sequence[Any] | None, plans: Sequence[Any] | None,
             i: int) -> tuple[Any, Any, float]:
    from chord_core.analysis.request import probe_input
    from chord_core.media.sampling import plan_sampling

    info = infos[i] if infos is not None and i < len(infos) else None
    plan = plans[i] if plans is not None and i < len(plans) else None
    t = time.perf_counter()
    if info is None:
        info = probe_input(req.video_path)
    probe_s = time.perf_counter() - t
    return info, plan or plan_sampling(info, req.task, req.sampling), probe_s


def _score(lm: Any, ready: list, batches: Iterator[tuple[list, list, list]],
           cancel: threading.Event | None) -> list[dict]:
    """Score all (frame, statement) pairs as they come, then give each request its frames'
    scores and its share of the time (by frame count)."""
    from chord_core.analysis.entailment import body_from_scores, score_batches

    scores, pre_s, run_s = score_batches(lm, batches, cancel=cancel)
    bodies, at, n = [], 0, max(1, len(scores))
    for _, it in ready:
        k = len(it["frames"])
        share = k / n
        bodies.append(body_from_scores(it["plan"], it["statement"], scores[at:at + k],
                                       pre_s * share, run_s * share, it["think"]))
        at += k
    return bodies
