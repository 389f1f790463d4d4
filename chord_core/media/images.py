"""Still images as inputs: a one-frame clip at t = 0, under one format policy.

The service's visual-entailment tasks (OFA-VE's ``/batch_predict``) and chat requests with an
``image_url`` bring single images. They run through the same jobs, workers and engine as
clips: ``image_info`` gives the ``VideoInfo`` of a one-frame clip, ``read_image`` its frame.
The probe refuses images for *videos* (an image is not a video); here they are welcome, but
only by an image extension and only when Pillow really decodes them.

One format policy, decided by the bytes (never the name): Pillow opens an image only with
the plugins of ``FORMATS`` (PNG, JPEG, WebP, BMP), so an upload, a server path and a
``/batch_predict`` task accept and refuse the same bytes. (Measured, issue 25: a multipart
``x.png`` or a ``.png`` under a root was accepted as GIF, TIFF, TGA, PPM, PCX, SGI, ICO, IM
or DDS, each a decoder of its own, while ``/batch_predict`` refused them.) Decoded pixels are
capped per image (``CHORD_MAX_IMAGE_PIXELS``) before any pixel is decoded, and
:class:`PixelBudget` caps a request's total (``CHORD_MAX_REQUEST_PIXELS``): four
8000×8000 PNGs in one request cost the worker +2.9 GiB.
"""

from __future__ import annotations

import io
import os
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from chord_core.config import env_value
from chord_core.errors import ConfigError, InputError
from chord_core.media.confined import source
from chord_core.types import VideoInfo

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "webp", "bmp")
# Pillow format → the extension Chord stores it under. MPO is how Pillow names a JPEG with
# a multi-picture extension (many phone photos): still a JPEG to every reader.
FORMATS = {"PNG": "png", "JPEG": "jpg", "MPO": "jpg", "WEBP": "webp", "BMP": "bmp"}
_PLUGINS = ("PNG", "JPEG", "WEBP", "BMP")  # the only decoders Pillow may try
MAX_IMAGE_PIXELS_DEFAULT = 4096 * 4096  # 16.8 MP: a 12 MP photo fits; Qwen sees ≤ 1 MP
MAX_REQUEST_PIXELS_DEFAULT = 4 * MAX_IMAGE_PIXELS_DEFAULT  # 67 MP: a quarter of the 4×64 MP
_HINT = "send a PNG, JPEG, WebP or BMP image"
_ERRORS: tuple[type[BaseException], ...] = (OSError, SyntaxError, ValueError)


def _pixels_env(name: str, default: int) -> int:
    raw = env_value(name)
    try:
        value = int(raw.replace("_", "")) if raw else default
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name} must be a positive number of pixels, got {raw!r}",
                          hint=f"e.g. {name}={default} (unset: {default:,})")
    return value


def max_image_pixels() -> int:
    """Most pixels one image may hold (``CHORD_MAX_IMAGE_PIXELS``), read at call time."""
    return _pixels_env("CHORD_MAX_IMAGE_PIXELS", MAX_IMAGE_PIXELS_DEFAULT)


def max_request_pixels() -> int:
    """Most pixels all images of one request may hold (``CHORD_MAX_REQUEST_PIXELS``)."""
    return _pixels_env("CHORD_MAX_REQUEST_PIXELS", MAX_REQUEST_PIXELS_DEFAULT)


def _mp(pixels: int) -> str:
    return f"{pixels / 1_000_000:.1f} MP" if pixels >= 100_000 else f"{pixels:,} pixels"


class PixelBudget:
    """The pixels a request's images may still hold; ``take`` is thread-safe (a request's
    images are checked on several threads) and refuses the image that goes over."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = max_request_pixels() if limit is None else limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, info: VideoInfo, what: str = "this image") -> None:
        pixels = info.width * info.height
        with self._lock:
            if self.used + pixels > self.limit:
                raise InputError(f"{what} ({info.width}×{info.height}) takes the request's "
                                 f"images past {_mp(self.limit)} in all",
                                 hint="send fewer or smaller images per request (the server "
                                      "sets the total with CHORD_MAX_REQUEST_PIXELS)")
            self.used += pixels


@contextmanager
def open_image(path: str | Path | io.BytesIO, name: str = "") -> Iterator[Image.Image]:
    """Pillow's image, opened only as one of ``FORMATS`` and no larger than
    ``max_image_pixels``; InputError otherwise (what it is not, and what to send)."""
    from PIL import Image, UnidentifiedImageError

    shown = name or (Path(path).name if isinstance(path, (str, Path)) else "the image")
    try:
        with Image.open(path, formats=_PLUGINS) as img:
            if img.format not in FORMATS:
                raise UnidentifiedImageError(img.format)
            w, h, cap = img.size[0], img.size[1], max_image_pixels()
            if w * h > cap:
                raise InputError(f"image {shown} is {w}×{h} ({_mp(w * h)}); the limit is "
                                 f"{_mp(cap)}", hint=f"resize it to at most {_mp(cap)} (the "
                                 "server sets the limit with CHORD_MAX_IMAGE_PIXELS)")
            yield img
    except UnidentifiedImageError:
        raise InputError(f"{shown} is not a PNG, JPEG, WebP or BMP image", hint=_HINT) from None
    except (*_ERRORS, Image.DecompressionBombError) as exc:
        raise InputError(f"{shown} is not a readable image ({type(exc).__name__})",
                         hint=_HINT) from None


def image_format(data: bytes) -> str:
    """The extension for image bytes, by their content under the one policy; InputError
    for anything else (the service's base64, data URLs and multipart uploads)."""
    with open_image(io.BytesIO(data)) as img:
        return FORMATS[img.format or ""]


def is_image_path(path: str | Path) -> bool:
    return Path(path).suffix.lower().lstrip(".") in IMAGE_EXTENSIONS


def image_info(path: str | Path, *, decode: bool = True) -> VideoInfo:
    """The image as a one-frame clip (fps 1, duration 1 s). Raises InputError when the file
    is not a regular, decodable image of sane size. ``decode=False`` reads only the header
    (the job manager's planning: the worker decodes it anyway, and ``read_image`` raises the
    same InputError for a file that does not decode)."""
    p = Path(path)
    try:
        with source(p) as src:
            st = os.stat(src)
    except OSError:
        raise InputError(f"no image at {p.name}", hint=_HINT) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{p.name} is not a regular file", hint=_HINT)
    if st.st_size == 0:
        raise InputError(f"image {p.name} is empty (0 bytes)", hint=_HINT)
    with source(p) as src, open_image(src, p.name) as img:
        w, h = img.size
        if _orientation(img, decode) in (5, 6, 7, 8):  # EXIF orientation: shown rotated
            w, h = h, w
        fmt = (img.format or "").lower()
        if decode:
            _load(img, p.name)  # decodes it: a truncated or corrupt file fails here
    return VideoInfo(path=str(p), duration_s=1.0, fps=1.0, frame_count=1, width=w, height=h,
                     codec=fmt, container="image", header_fps=1.0, header_frame_count=1,
                     stored_wh=(w, h), timeline=((0, 0.0, 1.0),))


def _orientation(img: Image.Image, decode: bool) -> int | None:
    """The EXIF orientation tag. Pillow's ``getexif`` on a PNG decodes the whole image to look
    for an eXIf chunk after the pixel data (7 ms for a 448×448 PNG: planning a 512-image
    ``/batch_predict`` took seconds, while the worker waited to report); from the header
    alone, only an eXIf chunk before the pixel data — where PNG writers put it — is seen."""
    if not decode and (img.format or "").upper() == "PNG":
        from PIL import Image

        raw = img.info.get("exif")
        if not raw:
            return None
        exif = Image.Exif()
        exif.load(raw)
        return exif.get(0x0112)
    return img.getexif().get(0x0112)


def read_image(path: str | Path, size_wh: tuple[int, int] | None = None) -> np.ndarray:
    """The image as a 1×H×W×3 uint8 RGB array, resized to ``size_wh`` when given."""
    import numpy as np
    from PIL import Image, ImageOps

    name = Path(path).name
    with source(path) as src, open_image(src, name) as opened:
        _load(opened, name)
        img = ImageOps.exif_transpose(opened).convert("RGB")
        if size_wh is not None and img.size != tuple(size_wh):
            img = img.resize(tuple(size_wh), Image.Resampling.BICUBIC)
        return np.array(img, dtype=np.uint8)[None]


def _load(img: Any, name: str) -> None:
    """Decode the pixels; a truncated or corrupt file is an InputError saying so."""
    from PIL import Image

    try:
        img.load()
    except (*_ERRORS, Image.DecompressionBombError) as exc:
        raise InputError(f"{name} is not a readable image ({type(exc).__name__})",
                         hint=_HINT) from None
