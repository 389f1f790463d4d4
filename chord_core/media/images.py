"""Still images as inputs: a one-frame clip at t = 0.

The service's visual-entailment tasks (OFA-VE's ``/batch_predict``) and chat requests with an
``image_url`` bring single images. They run through the same jobs, workers and engine as
clips: ``image_info`` gives the ``VideoInfo`` of a one-frame clip, ``read_image`` its frame.
The probe refuses images for *videos* (an image is not a video); here they are welcome, but
only by an image extension and only when Pillow really decodes them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from chord_core.errors import InputError
from chord_core.media.confined import source
from chord_core.types import VideoInfo

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "webp", "bmp")
MAX_IMAGE_PIXELS = 64_000_000  # larger is a decompression bomb, not a photo
_HINT = "send a PNG, JPEG, WebP or BMP image"


def is_image_path(path: str | Path) -> bool:
    return Path(path).suffix.lower().lstrip(".") in IMAGE_EXTENSIONS


def image_info(path: str | Path, *, decode: bool = True) -> VideoInfo:
    """The image as a one-frame clip (fps 1, duration 1 s). Raises InputError when the file
    is not a regular, decodable image of sane size. ``decode=False`` reads only the header
    (the job manager's planning: the worker decodes it anyway, and ``read_image`` raises the
    same InputError for a file that does not decode)."""
    from PIL import Image, UnidentifiedImageError

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
    try:
        with source(p) as src, Image.open(src) as img:
            w, h = img.size
            if _orientation(img, decode) in (5, 6, 7, 8):  # EXIF orientation: shown rotated
                w, h = h, w
            if w * h > MAX_IMAGE_PIXELS:
                raise InputError(f"image {p.name} is {w}×{h}, too large",
                                 hint=f"send at most {MAX_IMAGE_PIXELS // 1_000_000} MP")
            fmt = (img.format or "").lower()
            if decode:
                img.load()  # decodes it: a truncated or corrupt file fails here
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError,
            Image.DecompressionBombError) as exc:
        raise InputError(f"{p.name} is not a readable image ({type(exc).__name__})",
                         hint=_HINT) from None
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
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with source(path) as src, Image.open(src) as img:
            img = ImageOps.exif_transpose(img).convert("RGB")
            if size_wh is not None and img.size != tuple(size_wh):
                img = img.resize(tuple(size_wh), Image.Resampling.BICUBIC)
            return np.array(img, dtype=np.uint8)[None]
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError,
            Image.DecompressionBombError) as exc:
        raise InputError(f"{Path(path).name} is not a readable image ({type(exc).__name__})",
                         hint=_HINT) from None
