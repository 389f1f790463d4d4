"""Browser-playable previews of clips browsers cannot play (AVI, MKV, MPEG-4 part 2, HEVC…):
a small H.264 MP4 made once per clip with PyAV, keeping every frame's presentation time so
the result's timestamps line up with the preview's. Kept in ``<data dir>/previews``, named by
the clip's key, private to this user. The clip is opened under the media roots at the
moment it is read (``media.confined.opened``), so a clip swapped for a link to a file
elsewhere is refused, never transcoded.
"""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterator, Sequence

from chord_core.config import default_data_dir
from chord_core.types import VideoInfo

log = logging.getLogger(__name__)

PLAYABLE_CONTAINERS = {".mp4", ".webm", ".mov", ".m4v"}
PLAYABLE_CODECS = {"h264", "avc1", "vp8", "vp9", "av1"}
PREVIEW_MAX_W = 960
PREVIEW_MAX_S = 20 * 60.0  # longer clips get no preview (it would take minutes to make)
PREVIEW_TIME_BASE = Fraction(1, 90000)  # fine enough that a nudge of one tick is invisible
# In the preview's name: raised whenever how a preview is made changes what it shows, so one
# made before is not served again. 2: AVI frame k at k frame intervals (issue 28: previews of
# packed-B-frame AVIs had every third frame 41.7 ms off).
PREVIEW_VERSION = 2


def plays_in_browser(path: str, info: VideoInfo | None) -> bool:
    """Whether Chromium/Firefox play this file as is: container and video codec."""
    if Path(path).suffix.lower() not in PLAYABLE_CONTAINERS:
        return False
    codec = (info.codec if info is not None else "").lower()
    return not codec or codec in PLAYABLE_CODECS


def previews_dir(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / "previews"


def preview_file(clip_key: str, data_dir: Path | None = None) -> Path:
    """Where the clip's preview is kept (a new ``PREVIEW_VERSION`` makes a new one)."""
    return previews_dir(data_dir) / f"{clip_key}.v{PREVIEW_VERSION}.mp4"


def drop_stale(out: Path) -> int:
    """Delete this clip's previews of earlier versions and their failure markers beside
    ``out``, the current one (clip keys are hex digests: ``<key>.*`` is this clip's alone);
    the current version's files, a half-written one too, stay. Returns how many went."""
    key, current = out.name.split(".", 1)[0], f"{out.stem}."  # "<key>.v2.": mp4, part, failed
    gone = 0
    for old in out.parent.glob(f"{key}.*"):
        if not old.name.startswith(current):
            old.unlink(missing_ok=True)
            gone += 1
    return gone


def _even(n: int) -> int:
    return max(2, n - n % 2)


def _preview_times(frames: Any, time_base: Fraction, rate: Fraction, *,
                   by_index: bool = False, index_times: Sequence[Fraction] = ()
                   ) -> Iterator[tuple[Any, int]]:
    """(frame, pts in PREVIEW_TIME_BASE ticks from the first frame), strictly increasing.

    The source's own presentation times are kept; a frame without one (AVI's packed B-frames,
    some MPEG-4 part 2 files) is placed one frame interval after the one before, and a time
    that does not increase (a repeated timestamp) moves one tick (11 µs) on: an MP4 muxer
    refuses both ("Invalid argument", errno 22) and the whole preview was lost.

    ``by_index`` (an AVI): frame k is at k frame intervals, the time AVI itself stores (a
    frame number) and the one the analysis gives it. The decoded times are not used: with
    packed B-frames they come out in packet order (OpenCV's Megamind.avi decodes as pts
    1, 2, 3, 5, 4, …), which put every third frame of its preview one frame off. When
    ``index_times`` is given (the stream's packet times, sorted: ``_avi_times``), frame k is at
    the k-th of them: a variable-frame-rate AVI (frames skipped in its index) keeps its gaps,
    where k intervals re-timed a 30 s Cinepak clip into 4.5 s at its nominal 15 fps."""
    start, last = None, -1
    step = Fraction(1) / rate if rate else Fraction(1, 25)
    for k, frame in enumerate(frames):
        if by_index and k < len(index_times):
            tick = round(index_times[k] / PREVIEW_TIME_BASE)
        elif by_index:
            tick = round(k * step / PREVIEW_TIME_BASE)
        elif frame.pts is not None:
            t = Fraction(frame.pts) * time_base
            start = t if start is None else start
            tick = round((t - start) / PREVIEW_TIME_BASE)
        else:
            tick = 0 if last < 0 else last + round(step / PREVIEW_TIME_BASE)
        tick = max(tick, last + 1)
        last = tick
        yield frame, tick


def _transcode(src: str, tmp: Path, codec: str, max_w: int, options: dict[str, str]) -> int:
    """Write ``src``'s video as H.264 into ``tmp``; the number of frames written."""
    import av

    written = 0
    with av.open(src) as inp, av.open(str(tmp), "w", options=options) as dst:
        vin = inp.streams.video[0]
        w, h = vin.codec_context.width, vin.codec_context.height
        scale = min(1.0, max_w / max(1, w))
        ow, oh = _even(round(w * scale)), _even(round(h * scale))
        rate = vin.average_rate or vin.guessed_rate or Fraction(25)
        vout = _open_h264(dst, codec, (ow, oh), Fraction(rate))
        by_index = inp.format.name.split(",")[0] == "avi"  # frame numbers, not times
        times = _avi_times(src) if by_index else []
        for frame, tick in _preview_times(inp.decode(vin), vin.time_base, Fraction(rate),
                                          by_index=by_index, index_times=times):
            img = frame.reformat(width=ow, height=oh, format="yuv420p")
            img.pts, img.time_base = tick, PREVIEW_TIME_BASE
            for packet in vout.encode(img):
                dst.mux(packet)
            written += 1
        for packet in vout.encode():
            dst.mux(packet)
    return written


def _avi_times(src: str) -> list[Fraction]:
    """An AVI's frame times from its index: every packet's pts (a frame number, with gaps
    where a variable-rate file skips frames), sorted (packed B-frames come out of order),
    from the first. Packets only: nothing is decoded."""
    import av

    with av.open(src) as inp:
        vin = inp.streams.video[0]
        base = Fraction(vin.time_base)  # read while open: a closed stream's time base is garbage
        pts = sorted(p.pts for p in inp.demux(vin) if p.pts is not None and p.size)
    return [Fraction(p - pts[0]) * base for p in pts]


def _open_h264(dst: Any, codec: str, size_wh: tuple[int, int], rate: Fraction) -> Any:
    vout = dst.add_stream(codec, rate=rate)
    vout.width, vout.height, vout.pix_fmt = *size_wh, "yuv420p"
    vout.time_base = vout.codec_context.time_base = PREVIEW_TIME_BASE
    vout.options = {"crf": "26", "preset": "veryfast"}
    return vout


def _transcode_opencv(src: str, tmp: Path, codec: str, max_w: int, info: VideoInfo) -> int:
    """The fallback for files PyAV cannot decode but Chord's OpenCV reader can: the frames
    as Chord reads them (upright), at the probe's own frame times (``info.time_of``, the
    times a result's detections carry), encoded by PyAV."""
    import av

    from chord_core.media.video import iter_frames

    scale = min(1.0, max_w / max(1, info.width))
    size = (_even(round(info.width * scale)), _even(round(info.height * scale)))
    rate = Fraction(info.fps).limit_denominator(1001) if info.fps > 0 else Fraction(25)
    written, last = 0, -1
    with av.open(str(tmp), "w") as dst:
        vout = _open_h264(dst, codec, size, rate)
        for _, t_s, rgb in iter_frames(src, size_wh=size, time_of=info.time_of):
            last = max(round(Fraction(t_s).limit_denominator(90000) / PREVIEW_TIME_BASE),
                       last + 1)
            img = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
            img.pts, img.time_base = last, PREVIEW_TIME_BASE
            for packet in vout.encode(img):
                dst.mux(packet)
            written += 1
        for packet in vout.encode():
            dst.mux(packet)
    return written


def _write_any(src: str, tmp: Path, codec: str, max_w: int, info: VideoInfo | None) -> int:
    """PyAV's own decode (with the MP4 index first, then without), then OpenCV's frames."""
    import av

    errors = []
    for options in ({"movflags": "+faststart"}, {}):
        try:
            return _transcode(src, tmp, codec, max_w, options)
        except (av.FFmpegError, OSError, ValueError, IndexError) as exc:  # PyAV 18: not OSError
            errors.append(f"{type(exc).__name__}: {exc}")
            log.info("preview of %s (%s) failed: %s", src, options or "no options", exc)
    if info is None or info.width < 2:
        raise ValueError("; ".join(errors))
    return _transcode_opencv(src, tmp, codec, max_w, info)


def make_preview(src: str, out: Path, max_w: int = PREVIEW_MAX_W,
                 info: VideoInfo | None = None, *, roots: Sequence[str]) -> Path:
    """Transcode ``src``'s video stream to H.264 (no audio) at most ``max_w`` wide, each
    frame keeping its presentation time. Written to a temp file, then moved in place. A
    file PyAV cannot transcode is read as the analysis reads it (OpenCV, ``info``'s times).
    ``src`` is opened under ``roots`` (InputError if it is not a regular file there now).

    A failure is remembered next to the preview (``failed_marker``) so that a page rerun
    neither tries again nor logs it again; the next version of Chord (or a deleted marker)
    tries again."""
    from chord_core.analysis.render import h264_encoder
    from chord_core.media.confined import opened
    from chord_ui.uploads import private_dir

    codec = h264_encoder()
    if codec is None:
        raise RuntimeError("PyAV has no H.264 encoder")
    private_dir(out.parent)
    tmp = out.with_name(out.stem + ".part.mp4")
    try:
        with opened(src, roots) as (name, _):
            written = _write_any(name, tmp, codec, max_w, info)
        if not written:
            raise ValueError("no video frame could be decoded")
        os.chmod(tmp, 0o600)
        os.replace(tmp, out)
    except Exception as exc:
        failed_marker(out).write_text(f"{type(exc).__name__}: {exc}\n")
        raise
    finally:
        tmp.unlink(missing_ok=True)
    log.info("made the browser preview %s of %s (%d frames)", out, src, written)
    return out


def failed_marker(out: Path) -> Path:
    """Where a failed preview of ``out`` is remembered (its error text)."""
    return out.with_suffix(".failed")
