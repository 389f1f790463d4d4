"""One image format policy, by the bytes (``media.images``): real bytes of every format
Pillow writes; only PNG, JPEG, WebP and BMP are read, whatever the file is named, by the
planner (header), the worker (decode) and the service's bytes check alike. Pixels are capped
per image before decoding, and per request by ``PixelBudget``."""

from __future__ import annotations

import io
import threading

import pytest
from PIL import Image

from chord_core.errors import ConfigError, InputError
from chord_core.media import images

REFUSED = ("GIF", "TIFF", "TGA", "PPM", "PCX", "SGI", "ICO", "IM", "DDS")
ALLOWED = {"PNG": "png", "JPEG": "jpg", "WEBP": "webp", "BMP": "bmp"}


def image_bytes(fmt: str, wh: tuple[int, int] = (32, 24)) -> bytes:
    """A small real image in ``fmt`` (DDS wants RGBA)."""
    img = Image.new("RGBA" if fmt == "DDS" else "RGB", wh, (200, 30, 30))
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


@pytest.mark.parametrize("fmt", REFUSED, ids=REFUSED)
def test_other_formats_named_png_are_refused_everywhere(tmp_path, fmt) -> None:
    path = tmp_path / "x.png"
    path.write_bytes(image_bytes(fmt))
    calls = {"header": lambda: images.image_info(path, decode=False),
             "decode": lambda: images.image_info(path),
             "worker": lambda: images.read_image(path),
             "bytes": lambda: images.image_format(path.read_bytes())}
    messages = set()
    for call in calls.values():
        with pytest.raises(InputError) as err:
            call()
        messages.add(err.value.message.replace("the image", "x.png"))
        assert err.value.hint == "send a PNG, JPEG, WebP or BMP image"
    assert messages == {"x.png is not a PNG, JPEG, WebP or BMP image"}


@pytest.mark.parametrize("fmt", list(ALLOWED), ids=list(ALLOWED))
def test_the_allowed_formats_are_read_by_their_bytes(tmp_path, fmt) -> None:
    data = image_bytes(fmt)
    path = tmp_path / "named-wrong.bmp"  # the name does not decide: the bytes do
    path.write_bytes(data)
    assert images.image_format(data) == ALLOWED[fmt]
    info = images.image_info(path)
    assert (info.width, info.height, info.codec) == (32, 24, fmt.lower())
    assert images.read_image(path).shape == (1, 24, 32, 3)


def test_pixels_are_capped_per_image_before_decoding(tmp_path, monkeypatch) -> None:
    path = tmp_path / "big.png"
    path.write_bytes(image_bytes("PNG", (200, 100)))  # 20,000 px
    monkeypatch.setenv("CHORD_MAX_IMAGE_PIXELS", "19999")
    for call in (lambda: images.image_info(path, decode=False), lambda: images.read_image(path),
                 lambda: images.image_format(path.read_bytes())):
        with pytest.raises(InputError, match=r"is 200×100 \(20,000 pixels\); the limit is 19,999 pixels"):
            call()
    monkeypatch.setenv("CHORD_MAX_IMAGE_PIXELS", "20000")
    assert images.image_info(path, decode=False).width == 200


@pytest.mark.parametrize("raw", ["0", "-5", "lots"], ids=["zero", "negative", "text"])
def test_a_bad_cap_is_a_config_error(monkeypatch, raw) -> None:
    monkeypatch.setenv("CHORD_MAX_REQUEST_PIXELS", raw)
    with pytest.raises(ConfigError, match="CHORD_MAX_REQUEST_PIXELS must be a positive"):
        images.max_request_pixels()


def test_defaults_allow_a_12_mp_photo_but_not_four_8000_squared() -> None:
    assert 4032 * 3024 <= images.max_image_pixels() < 8000 * 8000
    assert images.max_request_pixels() < 4 * 8000 * 8000


def test_the_request_budget_refuses_the_image_that_goes_over(tmp_path) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(image_bytes("PNG", (100, 100)))
    info = images.image_info(path)
    budget = images.PixelBudget(limit=35_000)
    refused: list[str] = []

    def take() -> None:
        try:
            budget.take(info, "task 7's image")
        except InputError as exc:
            refused.append(exc.message)

    threads = [threading.Thread(target=take) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.used == 30_000 and len(refused) == 2
    assert refused[0] == "task 7's image (100×100) takes the request's images past 35,000 pixels in all"
