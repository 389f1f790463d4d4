"""Images planned from their header (``image_info(decode=False)``, what the job manager does
for every ``/batch_predict`` image): no pixels are decoded — a PNG whose pixel data is cut
still plans, and only a decode finds it — and an EXIF orientation still swaps the shown
width and height, for PNG and JPEG alike."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from chord_core.errors import InputError
from chord_core.media.images import image_info


def _picture(path, fmt: str, orientation: int | None = None):
    img = Image.fromarray(np.random.default_rng(1).integers(0, 256, (120, 200, 3),
                                                            dtype=np.uint8))
    kwargs = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif
    img.save(path, fmt, **kwargs)
    return path


def test_the_header_plans_without_decoding_the_pixels(tmp_path):
    good = _picture(tmp_path / "good.png", "PNG")
    cut = tmp_path / "cut.png"
    cut.write_bytes(good.read_bytes()[:3000])  # a header that reads, pixels that do not
    info = image_info(cut, decode=False)
    assert (info.width, info.height, info.container) == (200, 120, "image")
    with pytest.raises(InputError, match="cut.png is not a readable image"):
        image_info(cut)


@pytest.mark.parametrize("fmt,suffix", [("PNG", "png"), ("JPEG", "jpg")])
@pytest.mark.parametrize("orientation,shown", [(None, (200, 120)), (1, (200, 120)),
                                               (6, (120, 200)), (8, (120, 200))])
def test_exif_orientation_from_the_header(tmp_path, fmt, suffix, orientation, shown):
    path = _picture(tmp_path / f"o.{suffix}", fmt, orientation)
    for decode in (False, True):
        info = image_info(path, decode=decode)
        assert (info.width, info.height) == shown, (decode, info)
