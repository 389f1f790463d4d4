"""What the benchmark scripts share: test clips, timing, and the requests they time."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chord_core.analysis.request import AnalysisRequest  # noqa: E402
from chord_core.config import SamplingConfig  # noqa: E402


def make_clips(folder: Path, n: int, seconds: float, size_wh: tuple[int, int]) -> list[str]:
    """``n`` synthetic clips (10 fps, a moving square; seed = index) in ``folder``."""
    from chord_core.testing.videos import make_video

    folder.mkdir(parents=True, exist_ok=True)
    return [str(make_video(folder / f"c{size_wh[0]}_{seconds:g}_{i}.mp4", duration_s=seconds,
                           fps=10.0, size_wh=size_wh, seed=i).path) for i in range(n)]


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, repeats: int = 1) -> tuple[float, object]:
    """Median wall seconds of ``repeats`` calls (GPU work included), and the last result."""
    times, out = [], None
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        out = fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def describe_req(clip: str, tokens: int, sampling: SamplingConfig | None = None
                 ) -> AnalysisRequest:
    """A describe request with a fixed output length (end tokens ignored), 2 fps default."""
    return AnalysisRequest(clip, "describe", sampling=sampling or SamplingConfig(fps=2.0),
                           max_new_tokens=tokens, min_new_tokens=tokens)


def ground_req(clip: str, tokens: int, batch: int = 0) -> AnalysisRequest:
    """A grounding request at 2 fps with a fixed output length per frame."""
    return AnalysisRequest(clip, "ground", "the green square", sampling=SamplingConfig(fps=2.0),
                           max_new_tokens=tokens, min_new_tokens=tokens, batch_size=batch)


def clip_inputs(lm, clips: list[str], sampling: SamplingConfig, prompt: str | None = None):
    """Processor output for these clips as one left-padded batch, on the model's device
    (what ``model.describe_batch`` feeds the model)."""
    from chord_core.media.probe import probe
    from chord_core.media.sampling import plan_sampling, video_metadata
    from chord_core.media.video import read_frames
    from chord_core.model.loading import build_video_batch
    from chord_core.model.prompts import DEFAULT_DESCRIBE_PROMPT

    items = []
    for clip in clips:
        info = probe(clip)
        plan = plan_sampling(info, "describe", sampling)
        frames, idx = read_frames(clip, plan.frame_indices, plan.input_wh)
        items.append((frames, video_metadata(info, idx), prompt or DEFAULT_DESCRIBE_PROMPT))
    return build_video_batch(lm, items).to(lm.input_device)
