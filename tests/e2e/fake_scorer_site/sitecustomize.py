"""The fake scorer at the model boundary, in every process a test starts with this folder on
``PYTHONPATH`` (the app, and the model workers it spawns, where a monkeypatch cannot reach).

The tiny model's weights are random, so ``entailment.score_batches`` (pixels in,
P(entailment) out) is replaced: a frame "entails" a statement when the synthetic clip's
green square is in its left third (P 0.95), else not (P 0.05). Everything else is real.
Only the tests put this folder on the path; Chord itself never imports it.
"""

from __future__ import annotations

from typing import Any


def fake_score_batches(lm: Any, batches: Any, *, total: int = 0, cancel: Any = None,
                       on_batch: Any = None, think_tokens: Any = None) -> Any:
    import numpy as np

    from chord_core.analysis.entailment import EntailScore

    scores = []
    for images, *_rest in batches:  # (images, statements[, budgets])
        for image in images:
            rgb = np.asarray(image).astype(int)
            green = (rgb[..., 1] > 150) & (rgb[..., 0] < 100) & (rgb[..., 2] < 100)
            xs = np.nonzero(green)[1]
            p = 0.95 if xs.size and xs.mean() < rgb.shape[1] / 3 else 0.05
            scores.append(EntailScore({"entailment": p, "neutral": (1 - p) / 2,
                                       "contradiction": (1 - p) / 2}, 1.0))
    return scores, 0.0, 0.0


try:
    from chord_core.analysis import entailment as _entailment
except ImportError:  # a process that is not Chord's
    pass
else:
    _entailment.score_batches = fake_score_batches
