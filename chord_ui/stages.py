"""The progress headline in the interface language: the stage's name and, in frame loops,
``frame k/N``. In English the engine's own message is added as before
(``formatting.stage_text``); in Chinese only what can be said in Chinese is shown."""

from __future__ import annotations

from chord_core.types import ProgressEvent
from chord_ui.formatting import STAGE_LABELS, stage_text
from chord_ui.i18n import translate

FRAME_LOOPS = ("decoding", "grounding_frames", "rendering")


def stage_line(event: ProgressEvent | None, state: str, lang: str) -> str:
    if lang == "en":
        return stage_text(event, state)
    if event is None:
        return translate(STAGE_LABELS["queued"] if state == "queued" else "Starting", lang)
    label = STAGE_LABELS.get(event.stage)
    name = translate(label, lang) if label else translate("Working", lang)
    if event.stage in FRAME_LOOPS and event.total > 0:
        return translate("{stage}: frame {done}/{total}", lang, stage=name, done=event.done,
                         total=event.total)
    return name
