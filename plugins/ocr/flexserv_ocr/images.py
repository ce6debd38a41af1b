"""Decoding images for OCR, with the pixel count checked from the header before any decoding."""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError

from flexserv_ocr.errors import InvalidDocument, TooManyPixels


def check_pixels(width: int, height: int, limit: int, what: str, param: str) -> None:
    if width * height > limit:
        raise TooManyPixels(
            f"{what} is {width}x{height} = {width * height} pixels; this server reads at most {limit} "
            "(--ocr-max-pixels).",
            param=param,
        )


def decode_image(data: bytes, max_pixels: int, param: str) -> Any:
    """An RGB :class:`PIL.Image.Image`; 413 ``too_many_pixels`` when the header
    announces more than ``max_pixels`` (nothing is decompressed), 400 when corrupt.
    Errors name ``param``, the input's path in the request."""
    return load_image(open_image(data, max_pixels, param), param)


def open_image(data: bytes, max_pixels: int, param: str) -> Any:
    """The image with only its header read (its size known, nothing decompressed);
    413 ``too_many_pixels`` over ``max_pixels``, 400 when the header is corrupt."""
    what = f"'{param}'"
    try:
        with warnings.catch_warnings():
            # Pillow's own bomb guard is process-wide; ours is the setting, checked next
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image: Any = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        # Pillow's own guard (twice its process-wide limit) fired first; its message has the count
        found = re.search(r"\((\d+) pixels\)", str(exc))
        count = f"{int(found.group(1))} pixels" if found else "more pixels than Pillow opens"
        raise TooManyPixels(
            f"{what} announces {count}; this server reads at most {max_pixels} (--ocr-max-pixels).", param=param
        ) from None
    except UnidentifiedImageError:
        # Pillow's message is "cannot identify image file <_io.BytesIO object at 0x...>"
        raise InvalidDocument(
            f"{what} could not be read as an image: its header is corrupt or announces no pixels.", param=param
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise InvalidDocument(f"{what} could not be read as an image: {exc}", param=param) from None
    check_pixels(image.width, image.height, max_pixels, what, param)
    return image


def load_image(image: Any, param: str) -> Any:
    """An image from :func:`open_image` decoded, turned upright and in RGB; 400 when corrupt."""
    what = f"'{param}'"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
            image = ImageOps.exif_transpose(image) or image
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise InvalidDocument(f"{what} is truncated or corrupt: {exc}", param=param) from None
    return to_rgb(image)


def to_rgb(image: Any) -> Any:
    """RGB, with any transparency laid over white (as a page would show it)."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, "white")
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image if image.mode == "RGB" else image.convert("RGB")


def within_pixels(image: Any, max_pixels: int) -> Any:
    """``image`` scaled down (aspect kept) to at most ``max_pixels``; unchanged when it fits."""
    if image.width * image.height <= max_pixels:
        return image
    scale = (max_pixels / (image.width * image.height)) ** 0.5
    size = (max(1, int(image.width * scale)), max(1, int(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)


def png_encode(image: Any) -> bytes:
    """PNG bytes of ``image`` (fast compression: a page image is decoded again at once)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return buffer.getvalue()
