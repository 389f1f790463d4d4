"""The vision tower's output for a processor batch, as one tensor (the tests that compare
the tower's attention or rotary paths read it the same way)."""

from __future__ import annotations

import torch


def video_features(lm, inputs) -> torch.Tensor:
    with torch.inference_mode():
        out = lm.model.model.get_video_features(inputs["pixel_values_videos"],
                                                inputs["video_grid_thw"])
    out = getattr(out, "pooler_output", out)
    return torch.cat(list(out)) if isinstance(out, (list, tuple)) else out
