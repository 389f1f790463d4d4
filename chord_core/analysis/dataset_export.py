"""Grounding results as datasets annotation tools read: COCO and YOLO, with the frame images.

Every sampled frame of the result is one image (``frame_000123.jpg``, named by its frame
index: the k-th frame the decoder outputs, as in the result), its boxes the result's
detections on that frame (interpolated boxes included only when asked: they were never
seen by the model). A frame with no box is kept as a negative image. Classes are the
detections' labels (the target when a box has none), in first-seen order.

Written by ``supervision``'s ``DetectionDataset`` (``as_coco`` / ``as_yolo``), the same
library whose loaders (``from_coco`` / ``from_yolo``) the tests read them back with:

    <out>/coco/images/*.jpg  <out>/coco/annotations.json
    <out>/yolo/images/*.jpg  <out>/yolo/labels/*.txt  <out>/yolo/data.yaml

and ``<out>/frames.json``: which frame index and presentation time each image is.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from chord_core.errors import InputError, OutputError

FORMATS = ("coco", "yolo")


def _classes(result: Any, with_interpolated: bool) -> list[str]:
    names = [d.label or result.query or "target" for d in result.detections
             if with_interpolated or not d.interpolated]
    return list(dict.fromkeys(names)) or [result.query or "target"]


def build(result: Any, video_path: str | Path, images_dir: Path, *,
          with_interpolated: bool = False
          ) -> tuple[list[str], list[str], dict[str, Any], list[dict[str, Any]]]:
    """The frames written to ``images_dir`` as JPEG; (classes, image paths,
    ``sv.Detections`` by image path, frame facts)."""
    import cv2
    import supervision as sv

    from chord_core.media.video import read_frames_timed

    if result.task != "ground":
        raise InputError(f"a {result.task} result has no boxes to export as COCO or YOLO",
                         hint="export a grounding result (task ground)")
    wanted = tuple(sorted(set(result.sampling.frame_indices)))
    frames, read, times = read_frames_timed(str(video_path), wanted)
    classes = _classes(result, with_interpolated)
    images: list[str] = []
    annotations: dict[str, Any] = {}
    facts = []
    for frame, index, t_s in zip(frames, read, times):
        name = f"frame_{index:06d}.jpg"
        path = str(images_dir / name)
        dets = [d for d in result.detections if d.frame_index == index
                and (with_interpolated or not d.interpolated)]
        h, w = frame.shape[:2]
        boxes = np.array([[d.bbox[0] * w, d.bbox[1] * h, d.bbox[2] * w, d.bbox[3] * h]
                          for d in dets], dtype=float).reshape(-1, 4)
        class_ids = np.array([classes.index(d.label or result.query or "target")
                              for d in dets], dtype=int)
        conf = np.array([1.0 if d.score is None else d.score for d in dets], dtype=float)
        if not cv2.imwrite(path, np.ascontiguousarray(frame[..., ::-1])):  # BGR, as cv2 reads
            raise OSError(f"cannot write {path}")
        images.append(path)
        annotations[path] = sv.Detections(xyxy=boxes, class_id=class_ids, confidence=conf)
        facts.append({"image": name, "frame_index": int(index), "t_s": round(float(t_s), 4),
                      "boxes": len(dets), "width": w, "height": h})
    return classes, images, annotations, facts


def export(result: Any, video_path: str | Path, out: str | Path, fmt: str, *,
           with_interpolated: bool = False) -> Path:
    """Write ``fmt`` (coco or yolo) under ``out/<fmt>/``; returns that folder."""
    import supervision as sv

    if fmt not in FORMATS:
        raise InputError(f"unknown dataset format {fmt!r}", hint="coco or yolo")
    folder = Path(out) / fmt
    try:
        (folder / "images").mkdir(parents=True, exist_ok=True)
        classes, images, annotations, facts = build(result, video_path, folder / "images",
                                                    with_interpolated=with_interpolated)
        ds = sv.DetectionDataset(classes=classes, images=images, annotations=annotations)
        if fmt == "coco":
            ds.as_coco(images_directory_path=str(folder / "images"),
                       annotations_path=str(folder / "annotations.json"))
        else:
            ds.as_yolo(images_directory_path=str(folder / "images"),
                       annotations_directory_path=str(folder / "labels"),
                       data_yaml_path=str(folder / "data.yaml"))
        (folder / "frames.json").write_text(json.dumps(
            {"video": Path(video_path).name, "query": result.query, "classes": classes,
             "frames": facts}, indent=1))
    except OSError as exc:
        raise OutputError(f"cannot write the {fmt.upper()} dataset to {folder}: "
                          f"{exc.strerror or exc}",
                          hint="choose a folder you can write to, with room for the frames") \
            from None
    return folder


def zipped(folder: Path) -> bytes:
    """The dataset folder as ZIP bytes (the app's download button)."""
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(folder.parent))
    return buf.getvalue()


__all__ = ["export", "build", "zipped", "FORMATS"]
