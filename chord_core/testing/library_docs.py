"""Synthetic ``chord.result/v1`` documents and generated text, for the library's tests and
its scale benchmark (``benchmarks/library_scale.py``): what a describe, ground or entail job
stores, without running a model. Plain dicts; the same keys the engine writes.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

# Words of the footage people search (surveillance, inspection, lectures, uploads), so
# generated text has a realistic spread of common and rare terms (Zipf-like draw below).
WORDS = tuple("""person man woman child worker guard driver cyclist forklift truck car van bus
bicycle dog cat bird fence gate door window wall ladder roof stairs walkway corridor hallway
parking lot road street crosswalk sidewalk loading dock warehouse shelf pallet box crate
conveyor belt machine press robot arm camera screen slide whiteboard lecturer student desk
chair table laptop phone bag backpack helmet vest jacket umbrella red blue green yellow white
black orange grey dark bright night day rain snow fog sunlight shadow walks runs climbs jumps
falls sits stands opens closes enters leaves carries drops picks pushes pulls drives parks
stops turns waves points writes reads talks looks holds throws catches kicks slowly quickly
suddenly near behind beside across under over through into onto left right front back top
bottom center corner edge large small tall short empty crowded busy quiet moving still
gradient descent equation graph chart diagram formula proof theorem matrix vector loss""".split())


def sentence(rng: random.Random, words: int = 12) -> str:
    """A generated sentence: words drawn with a Zipf-like skew (a few very common)."""
    n = len(WORDS)
    picks = [WORDS[min(n - 1, int(rng.paretovariate(1.1)) - 1 + rng.randrange(3))]
             if rng.random() < 0.5 else WORDS[rng.randrange(n)] for _ in range(words)]
    return " ".join(picks).capitalize() + "."


def _video(path: str, duration_s: float) -> dict[str, Any]:
    return {"path": path, "duration_s": duration_s, "fps": 25.0,
            "frame_count": int(duration_s * 25), "width": 640, "height": 360, "codec": "h264",
            "rotation": 0, "container": "mp4", "header_fps": 25.0,
            "header_frame_count": int(duration_s * 25), "variable_fps": False,
            "stored_wh": [640, 360], "warnings": [], "timeline": []}


def result_doc(task: str, path: str, *, text: str = "", query: str = "",
               duration_s: float = 10.0, segments: Sequence[tuple[float, float]] = (),
               verdict: str = "entailment", supporting_s: Sequence[float] = (),
               times: Sequence[float] = ()) -> dict[str, Any]:
    """A stored result of ``task`` on the clip at ``path``: describe (``text``), ground
    (``query`` with ``segments``) or entail (``query`` as the statement, ``verdict``)."""
    times = list(times) or [round(duration_s * i / 8, 3) for i in range(8)]
    entailment = None
    if task == "entail":
        entailment = {"statement": query, "verdict": verdict,
                      "probabilities": {"entailment": 0.8, "neutral": 0.1,
                                        "contradiction": 0.1},
                      "frames": [], "supporting_s": list(supporting_s),
                      "contradicting_s": []}
    return {"schema": "chord.result/v1", "task": task, "query": query,
            "created_at": "2026-12-01T00:00:00+00:00", "video": _video(path, duration_s),
            "sampling": {"task": task, "fps": 1.0, "frame_indices": list(range(len(times))),
                         "timestamps_s": times, "input_wh": [644, 364], "visual_tokens": 0},
            "model": {"id": "test", "dtype": "float32", "device_map": {}, "test_model": True},
            "detections": [], "tracks": [],
            "segments": [{"track_id": i + 1, "start_s": a, "end_s": b, "label": query}
                         for i, (a, b) in enumerate(segments)],
            "text": text, "raw_outputs": [], "warnings": [], "timing": {},
            "entailment": entailment, "method": None, "spans": [], "grounded_frames": None,
            "partial": False, "tokens": None}


def store_result(store: Any, job_id: str, doc: dict[str, Any],
                 submitted_at: float | None = None) -> None:
    """Record a done job with ``doc`` as its result in a ``Store``."""
    store.add_job(job_id, video_path=doc["video"]["path"], task=doc["task"],
                  query=doc.get("query", ""), model="test", submitted_at=submitted_at)
    store.save_result(job_id, doc)
