"""Browser-playable previews of clips browsers cannot play (AVI, MKV, MPEG-4 part 2, HEVC…):
a small H.264 MP4 made once per clip with PyAV, keeping every frame's presentation time so
the result's timestamps line up with the preview's. Kept in ``<data dir>/previews``, named by
the clip's key, private to this user.
"""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from pathlib import Path

from chord_core.config import default_data_dir
from chord_core.types import VideoInfo

log = logging.getLogger(__name__)

PLAYABLE_CONTAINERS = {".mp4", ".webm", ".mov", ".m4v"}
PLAYABLE_CODECS = {"h264", "avc1", "vp8", "vp9", "av1"}
PREVIEW_MAX_W = 960
PREVIEW_MAX_S = 20 * 60.0  # longer clips get no preview (it would take minutes to make)


def plays_in_browser(path: str, info: VideoInfo | None) -> bool:
    """Whether Chromium/Firefox play this file as is: container and video codec."""
    if Path(path).suffix.lower() not in PLAYABLE_CONTAINERS:
        return False
    codec = (info.codec if info is not None else "").lower()
    return not codec or codec in PLAYABLE_CODECS


def previews_dir(data_dir: Path | None = None) -> Path:
    return (data_dir or default_data_dir()) / "previews"


def preview_file(clip_key: str, data_dir: Path | None = None) -> Path:
    return previews_dir(data_dir) / f"{clip_key}.mp4"


def _even(n: int) -> int:
    return max(2, n - n % 2)


def make_preview(src: str, out: Path, max_w: int = PREVIEW_MAX_W) -> Path:
    """Transcode ``src``'s video stream to H.264 (no audio) at most ``max_w`` wide, each
    frame keeping its presentation time. Written to a temp file, then moved in place."""
    import av

    from chord_core.analysis.render import h264_encoder
    from chord_ui.uploads import private_dir

    codec = h264_encoder()
    if codec is None:
        raise RuntimeError("PyAV has no H.264 encoder")
    private_dir(out.parent)
    tmp = out.with_name(out.stem + ".part.mp4")
    try:
        with av.open(src) as inp, av.open(str(tmp), "w", options={"movflags": "+faststart"}
                                          ) as dst:
            vin = inp.streams.video[0]
            w, h = vin.codec_context.width, vin.codec_context.height
            scale = min(1.0, max_w / max(1, w))
            ow, oh = _even(round(w * scale)), _even(round(h * scale))
            rate = vin.average_rate or vin.guessed_rate or Fraction(25)
            vout = dst.add_stream(codec, rate=rate)
            vout.width, vout.height, vout.pix_fmt = ow, oh, "yuv420p"
            vout.time_base = vin.time_base
            vout.options = {"crf": "26", "preset": "veryfast"}
            start = None  # times from the first frame, as the result's timestamps are
            for frame in inp.decode(vin):
                if frame.pts is None:
                    continue
                start = frame.pts if start is None else start
                img = frame.reformat(width=ow, height=oh, format="yuv420p")
                img.pts, img.time_base = frame.pts - start, vin.time_base
                for packet in vout.encode(img):
                    dst.mux(packet)
            for packet in vout.encode():
                dst.mux(packet)
        os.chmod(tmp, 0o600)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    log.info("made the browser preview %s of %s", out, src)
    return out
