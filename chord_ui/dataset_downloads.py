"""COCO and YOLO downloads beside a grounding result's JSON/CSV/MP4: the sampled frames with
their boxes (chord_core.analysis.dataset_export), zipped when the button is pressed, kept
under the data folder's exports/datasets/<job>/ (private)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from chord_ui.i18n import t


def _zip(result: Any, path: str, job_id: str, fmt: str) -> bytes:
    from chord_core.analysis.dataset_export import export, zipped
    from chord_ui.uploads import exports_dir

    out = exports_dir() / "datasets" / job_id
    return zipped(export(result, path, out, fmt))


def dataset_buttons(where: Any, result: Any, clip: Any, job_id: str) -> None:
    """Two download buttons (COCO, YOLO) in ``where``; the frames are read on the click."""
    stem = Path(clip.name).stem
    for fmt, label in (("coco", t("COCO dataset (ZIP)")), ("yolo", t("YOLO dataset (ZIP)"))):
        where.download_button(label, lambda fmt=fmt: _zip(result, clip.path, job_id, fmt),
                              file_name=f"{stem}.{fmt}.zip", mime="application/zip",
                              key=f"{fmt}-{job_id}", on_click="ignore",
                              icon=":material/dataset:")
