"""The server's budget of decoded page pixels (``--ocr-max-pixels-in-flight``).

A page costs its pixels many times over once decoded (the RGB image, the engine's
arrays: about 14-18 bytes a pixel with RapidOCR), while its upload can be a few
hundred KiB of PNG; without a budget, N concurrent requests hold N such pages.
"""

from __future__ import annotations

from flexserv_batching import Budget

from flexserv_core import FlexServer, StashKey
from flexserv_ocr.settings import OcrSettings

PIXELS_KEY = StashKey[Budget]("ocr-pixels-in-flight")


def pixel_budget(server: FlexServer) -> Budget:
    """The server's budget, made on first use from its settings."""
    limit = server.settings.get(OcrSettings).ocr_max_pixels_in_flight
    return server.state.get_or_create(PIXELS_KEY, lambda: Budget(limit))
