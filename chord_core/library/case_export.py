"""A case (cases.py) written out for someone else: one folder, or one ZIP of it.

    <case>/case.json        ``chord.case/v1`` (CASE_JSON_SCHEMA): the case, every moment, and
                            the stored result of each moment's job
    <case>/report.md        the moments with times, labels, scores and their stills
    <case>/report.html      the same as one HTML page (every text escaped)
    <case>/clips/NN_….ext   each moment's span cut from its clip: **remuxed** (packets copied,
                            no re-encode) from the keyframe at or before the moment to its
                            end, in the clip's own container; re-encoded to H.264 MP4 only
                            when the packets cannot be copied (``cut: "re-encoded"``)
    <case>/stills/NN_….jpg  the frame at the moment's start, its label and time drawn on it

A remuxed clip begins at the keyframe before the moment (``clip_start_s``, said in the
JSON), so it can be a little longer than the moment, never shorter. Each clip is opened
under the media roots again (``check_regular_video``): a clip moved or deleted since gives
that moment an ``error``, not a failed export.
"""

from __future__ import annotations

import html
import json
import logging
import re
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chord_core.errors import ChordError, OutputError, VideoError

if TYPE_CHECKING:
    from chord_core.library.index import LibraryIndex

log = logging.getLogger(__name__)

CASE_SCHEMA = "chord.case/v1"
_MOMENT_PROPS = {
    "n": {"type": "integer", "minimum": 1}, "clip": {"type": "string"},
    "path": {"type": "string"}, "start_s": {"type": "number", "minimum": 0},
    "end_s": {"type": "number", "minimum": 0}, "label": {"type": "string"},
    "origin": {"enum": ["review", "search", "result", "ask"]}, "ref": {"type": "string"},
    "job_id": {"type": "string"}, "score": {"type": ["number", "null"]},
    "cut": {"enum": ["remuxed", "re-encoded", "none"]},
    "clip_file": {"type": ["string", "null"]}, "clip_start_s": {"type": ["number", "null"]},
    "clip_end_s": {"type": ["number", "null"]}, "still": {"type": ["string", "null"]},
    "error": {"type": ["string", "null"]}, "result": {"type": ["object", "null"]}}
CASE_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
    "required": ["schema", "case", "exported_at", "moments"],
    "properties": {
        "schema": {"const": CASE_SCHEMA}, "case": {"type": "string", "minLength": 1},
        "exported_at": {"type": "number"},
        "moments": {"type": "array", "items": {
            "type": "object", "required": list(_MOMENT_PROPS), "properties": _MOMENT_PROPS,
            "additionalProperties": False}}}}


def _slug(text: str, n: int = 40) -> str:
    return re.sub(r"[^\w.-]+", "_", text, flags=re.UNICODE).strip("_")[:n] or "clip"


def cut_clip(src: Path, dst_stem: Path, start_s: float, end_s: float) -> dict[str, Any]:
    """The span copied packet by packet (see the module docstring); falls back to
    re-encoding. Returns {file, cut, clip_start_s, clip_end_s}."""
    import av

    dst = dst_stem.with_suffix(src.suffix.lower() or ".mp4")
    try:
        first, last = _remux(src, dst, start_s, end_s)
        return {"file": dst, "cut": "remuxed", "clip_start_s": first, "clip_end_s": last}
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        log.info("cannot copy the packets of %s (%s): re-encoding the span", src.name, exc)
        dst.unlink(missing_ok=True)
    dst = dst_stem.with_suffix(".mp4")
    first, last = _reencode(src, dst, start_s, end_s)
    return {"file": dst, "cut": "re-encoded", "clip_start_s": first, "clip_end_s": last}


def _remux(src: Path, dst: Path, start_s: float, end_s: float) -> tuple[float, float]:
    import av

    from chord_core.media.confined import source

    with source(src) as name, av.open(name) as inp:  # under the roots when confined
        vs = inp.streams.video[0]
        tb = vs.time_base
        if tb is None:
            raise ValueError("its video stream has no time base")
        base = int(vs.start_time or 0)
        inp.seek(base + int(start_s / tb), stream=vs, backward=True, any_frame=False)
        with av.open(str(dst), "w") as out:
            os_ = out.add_stream_from_template(vs)
            offset, first, last = None, None, None
            for pkt in inp.demux(vs):
                if pkt.pts is None or pkt.dts is None or not pkt.size:
                    continue
                t = float((pkt.pts - base) * tb)
                if offset is None:
                    if not pkt.is_keyframe:
                        continue
                    offset, first = pkt.pts, t  # the clip starts at 0 (a B-frame dts < 0)
                if float((pkt.dts - base) * tb) > end_s + 1e-6 and last is not None:
                    break  # decode order: every frame shown up to end_s is in (dts ≤ pts)
                last = t if last is None else max(last, t)
                pkt.pts, pkt.dts = pkt.pts - offset, pkt.dts - offset
                pkt.stream = os_
                out.mux(pkt)
    if first is None or last is None:
        raise ValueError("no keyframe in the span")
    return round(first, 4), round(last, 4)


def _reencode(src: Path, dst: Path, start_s: float, end_s: float) -> tuple[float, float]:
    import av

    from chord_core.media.confined import source

    first = last = None
    with source(src) as name, av.open(name) as inp, av.open(str(dst), "w") as out:
        vs = inp.streams.video[0]
        enc = out.add_stream("libx264", rate=int(round(float(vs.average_rate or 10))))
        enc.width, enc.height, enc.pix_fmt = vs.width - vs.width % 2, \
            vs.height - vs.height % 2, "yuv420p"
        if vs.time_base is None:
            raise VideoError(f"{src.name} cannot be cut: its video stream has no time base",
                             hint="remux or re-encode the file (e.g. with ffmpeg), then "
                                  "export the case again")
        inp.seek(int(vs.start_time or 0) + int(start_s / vs.time_base), stream=vs,
                 backward=True)
        for frame in inp.decode(vs):
            t = float(frame.time or 0.0)
            if t < start_s - 1e-6:
                continue
            if t > end_s + 1e-6:
                break
            first = t if first is None else first
            last = t
            img = frame.reformat(width=enc.width, height=enc.height, format="yuv420p")
            img.pts = None
            out.mux(enc.encode(img))
        out.mux(enc.encode(None))
    if first is None or last is None:
        raise VideoError(f"{src.name} has no frame between {start_s:.2f} and {end_s:.2f} s",
                         hint="the clip may have been cut short since the moment was found")
    return round(first, 4), round(last, 4)


def annotated_still(src: Path, dst: Path, t_s: float, label: str) -> Path:
    """The frame at ``t_s`` with the label and the time written on a band at its foot."""
    import io

    from PIL import Image, ImageDraw

    from chord_core.library.ask import clock
    from chord_core.library.thumbs import frame_jpeg

    image = Image.open(io.BytesIO(frame_jpeg(src, t_s, width=640))).convert("RGB")
    draw = ImageDraw.Draw(image)
    band = max(18, image.height // 10)
    draw.rectangle((0, image.height - band, image.width, image.height), fill=(0, 0, 0))
    draw.text((6, image.height - band + 3), f"{clock(t_s)}  {label[:70]}", fill=(255, 255, 0))
    image.save(dst, "JPEG", quality=88)
    return dst


def _result(index: LibraryIndex, job_id: str) -> dict[str, Any] | None:
    rows = index.read("SELECT result_json FROM results WHERE job_id = ?", (job_id,)) \
        if job_id else []
    return json.loads(rows[0]["result_json"]) if rows else None


def _moment(index: LibraryIndex, folder: Path, n: int, m: dict[str, Any]) -> dict[str, Any]:
    from chord_core.media.confined import confine
    from chord_core.media.roots import check_regular_video, job_roots

    src = Path(m["path"])
    out: dict[str, Any] = {
        "n": n, "clip": src.name, "path": str(src), "start_s": float(m["start_s"]),
        "end_s": float(m["end_s"]), "label": m["label"], "origin": m["origin"],
        "ref": m["ref"], "job_id": m["job_id"], "score": m["score"], "cut": "none",
        "clip_file": None, "clip_start_s": None, "clip_end_s": None, "still": None,
        "error": None, "result": _result(index, m["job_id"])}
    stem = f"{n:02d}_{_slug(src.stem)}_{m['start_s']:.1f}-{m['end_s']:.1f}".replace(".", "_")
    try:
        src = check_regular_video(src)
        confine(src, job_roots())  # every read below opens it under the roots (a swap: refused)
        cut = cut_clip(src, folder / "clips" / stem, out["start_s"], out["end_s"])
        out.update(cut="remuxed" if cut["cut"] == "remuxed" else "re-encoded",
                   clip_file=f"clips/{cut['file'].name}", clip_start_s=cut["clip_start_s"],
                   clip_end_s=cut["clip_end_s"])
        annotated_still(src, folder / "stills" / f"{stem}.jpg", out["start_s"], m["label"])
        out["still"] = f"stills/{stem}.jpg"
    except ChordError as exc:
        out["error"] = exc.message
    return out


def export_case(index: LibraryIndex, case: str, dest: str | Path, *, as_zip: bool = False) -> Path:
    """Write ``case`` under the folder ``dest`` (``dest/<case>/``, replaced if there), or as
    ``dest/<case>.zip``; returns the folder or the ZIP."""
    from chord_core.library.case_report import write_reports
    from chord_core.library.cases import check_name, moments

    name = check_name(case)
    found = moments(index, name)
    if not found:
        raise OutputError(f"case {name!r} has no moments",
                          hint="add moments from the Review page, a search or a result first")
    folder = Path(dest) / _slug(name, MAX_DIR)
    try:
        if folder.exists():
            shutil.rmtree(folder)
        (folder / "clips").mkdir(parents=True)
        (folder / "stills").mkdir()
        doc = {"schema": CASE_SCHEMA, "case": name, "exported_at": time.time(),
               "moments": [_moment(index, folder, n, m) for n, m in enumerate(found, 1)]}
        (folder / "case.json").write_text(json.dumps(doc, indent=1))
        write_reports(folder, doc, html.escape)
        if as_zip:
            archive = shutil.make_archive(str(folder), "zip", folder.parent, folder.name)
            shutil.rmtree(folder)
            return Path(archive)
    except OSError as exc:
        raise OutputError(f"cannot write the case to {dest}: {exc.strerror or exc}",
                          hint="choose a folder you can write to, with room for the clips") \
            from None
    return folder


MAX_DIR = 60
__all__ = ["export_case", "cut_clip", "CASE_JSON_SCHEMA", "CASE_SCHEMA"]
