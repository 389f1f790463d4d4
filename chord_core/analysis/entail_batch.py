"""Many entailment requests in one scoring pass: the frames of every request (one each for
the service's images) go through the model together, ``batch_size`` pairs per forward pass,
while a thread reads the next requests' frames. A request whose file is bad fails alone."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Sequence

from chord_core.analysis.request import build_result
from chord_core.errors import ChordError
from chord_core.types import Result, Timing

if TYPE_CHECKING:
    from chord_core.analysis.engine import Engine
    from chord_core.analysis.request import AnalysisRequest

log = logging.getLogger(__name__)


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
                    "probe_s": probe_s, "decode_s": decode_s}
        except ChordError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=2) as pool:
        prepared = list(pool.map(prep, range(len(requests))))
    ready = [(i, it) for i, it in enumerate(prepared) if isinstance(it, dict)]
    for i, it in enumerate(prepared):
        if not isinstance(it, dict):
            results[i] = it
    if not ready:
        return results  # type: ignore[return-value]
    frames = [f for _, it in ready for f in it["frames"]]
    statements = [it["statement"] for _, it in ready for _ in it["frames"]]
    bodies = _score(lm, ready, frames, statements, engine.model_cfg.batch_size, cancel)
    for (i, it), body in zip(ready, bodies):
        timing = Timing(probe_s=it["probe_s"], load_s=0.0, decode_s=it["decode_s"],
                        preprocess_s=body.pop("preprocess_s"),
                        generate_s=body.pop("generate_s"),
                        total_s=time.perf_counter() - it["t0"])
        results[i] = build_result(requests[i], it["info"], it["plan"], lm.info, timing,
                                  tuple(it["warnings"]) + tuple(body.pop("warnings", ())),
                                  **body)
    return results  # type: ignore[return-value]


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


def _score(lm: Any, ready: list, frames: list, statements: list, batch_size: int,
           cancel: threading.Event | None) -> list[dict]:
    """Score all (frame, statement) pairs together, then give each request its frames'
    scores and its share of the time (by frame count)."""
    from chord_core.analysis.entailment import body_from_scores, score_images

    scores, pre_s, run_s = score_images(lm, frames, statements, batch_size=max(batch_size, 16),
                                        cancel=cancel)
    bodies, at, n = [], 0, max(1, len(frames))
    for _, it in ready:
        k = len(it["frames"])
        share = k / n
        bodies.append(body_from_scores(it["plan"], it["statement"], scores[at:at + k],
                                       pre_s * share, run_s * share))
        at += k
    return bodies
