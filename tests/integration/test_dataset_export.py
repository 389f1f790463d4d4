"""Grounding results as COCO and YOLO datasets, read back by a real reader (supervision's
``DetectionDataset.from_coco`` / ``from_yolo``): every sampled frame is an image, every box
comes back where the result put it, and the images are the clip's own frames (the synthetic
clip's green square is inside each box)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chord_core.errors import InputError
from chord_core.testing.videos import make_video


def _truth_result(path, hide=(1.0, 1.5)):  # noqa: ANN001, ANN202
    """A grounding Result whose boxes are the synthetic square's truth (the model boundary
    faked: the tiny model's random boxes would say nothing about the export)."""
    from chord_core.analysis import grounding as g
    from chord_core.analysis.request import plan
    from chord_core.testing.videos import _square_px
    from chord_core.types import ModelInfo, Result, Timing

    info, sp = plan(str(path), "ground", None)
    dets = []
    for idx, t in zip(sp.frame_indices, sp.timestamps_s):
        if hide[0] <= t < hide[1]:
            continue
        x1, y1, x2, y2 = _square_px(idx, info.frame_count, info.size_wh)
        w, h = info.size_wh
        dets.append(g.to_detection(g.ParsedBox((x1 / w, y1 / h, x2 / w, y2 / h),
                                               label="green square"), info.size_wh,
                                   t_s=t, frame_index=idx))
    return Result(task="ground", query="green square", video=info, sampling=sp,
                  model=ModelInfo(id="truth", dtype="none"), timing=Timing(total_s=0.1),
                  detections=tuple(dets), raw_outputs=("[]",) * sp.num_frames,
                  created_at="2026-01-01T00:00:00+00:00")


@pytest.fixture(scope="module")
def grounded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ds")
    clip = make_video(folder / "yard.mp4", duration_s=2.0, fps=10.0, size_wh=(320, 240)).path
    return clip, _truth_result(clip)


def _green_inside(image_bgr: np.ndarray, box: np.ndarray) -> float:
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    crop = image_bgr[y1:y2, x1:x2].astype(int)
    green = (crop[..., 1] > 150) & (crop[..., 2] < 100) & (crop[..., 0] < 100)
    return float(green.mean()) if crop.size else 0.0


@pytest.mark.parametrize("fmt", ["coco", "yolo"])
def test_a_grounding_result_is_read_back_by_supervision(grounded, tmp_path, fmt):
    import supervision as sv

    from chord_core.analysis.dataset_export import export

    clip, result = grounded
    folder = export(result, clip, tmp_path, fmt)
    if fmt == "coco":
        ds = sv.DetectionDataset.from_coco(str(folder / "images"),
                                           str(folder / "annotations.json"))
        coco = json.loads((folder / "annotations.json").read_text())
        assert {c["name"] for c in coco["categories"]} >= {"green square"}
    else:
        ds = sv.DetectionDataset.from_yolo(str(folder / "images"), str(folder / "labels"),
                                           str(folder / "data.yaml"))
    facts = json.loads((folder / "frames.json").read_text())["frames"]
    assert len(ds) == len(result.sampling.frame_indices) == len(facts)
    by_index = {d.frame_index: d for d in result.detections}
    empty = 0
    for path, image, dets in ds:
        fact = next(f for f in facts if f["image"] == path.split("/")[-1])
        truth = by_index.get(fact["frame_index"])
        if truth is None:
            assert len(dets) == 0  # a negative frame stays an image with no box
            empty += 1
            continue
        assert len(dets) == 1 and ds.classes[int(dets.class_id[0])] == "green square"
        assert np.allclose(dets.xyxy[0], truth.bbox_px, atol=1.5), (dets.xyxy[0], truth)
        assert image.shape[:2] == (240, 320)
        assert _green_inside(image, dets.xyxy[0]) > 0.5  # the box is on the clip's frame
    assert empty >= 1  # the hidden stretch: frames without boxes


def test_only_grounding_results_export(grounded, tmp_path):
    from dataclasses import replace

    from chord_core.analysis.dataset_export import export

    clip, result = grounded
    with pytest.raises(InputError, match="no boxes"):
        export(replace(result, task="describe"), clip, tmp_path, "coco")
    with pytest.raises(InputError, match="unknown dataset format"):
        export(result, clip, tmp_path, "voc")


def test_the_export_command_writes_both_datasets_of_a_stored_job(grounded, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import supervision as sv

    from chord_core.runtime.store import Store
    from chord_core.testing.library_docs import store_result

    clip, result = grounded
    data = tmp_path / "data"
    with Store(data / "chord.sqlite3") as store:
        store_result(store, "j-ground", result.to_dict())
    env = dict(os.environ, CHORD_DATA_DIR=str(data), CHORD_MEDIA_ROOTS=str(clip.parent))
    out = subprocess.run([sys.executable, "-m", "chord_core", "export", "j-ground", "--coco",
                          str(tmp_path / "ds"), "--yolo", str(tmp_path / "ds")],
                         cwd=Path(__file__).resolve().parents[2], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    ds = sv.DetectionDataset.from_yolo(str(tmp_path / "ds/yolo/images"),
                                       str(tmp_path / "ds/yolo/labels"),
                                       str(tmp_path / "ds/yolo/data.yaml"))
    assert sum(len(d) for _, _, d in ds) == len(result.detections)
    assert (tmp_path / "ds/coco/annotations.json").is_file()
    env["CHORD_MEDIA_ROOTS"] = str(tmp_path / "elsewhere")  # the clip outside the roots
    refused = subprocess.run([sys.executable, "-m", "chord_core", "export", "j-ground",
                              "--coco", str(tmp_path / "ds2")], env=env, capture_output=True,
                             text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
