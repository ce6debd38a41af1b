"""RapidOCR (PP-OCR detection + recognition on onnxruntime); the models ship inside its wheel.

Detection is tuned with ``limit_type=max``: the longest side is scaled *down* to
``--ocr-rapidocr-max-side`` (960). RapidOCR's default (``min``, 736) scales the
short side *up*, which on a typical page or scan costs ~5x the time for the same
text (``benchmarks/ocr_bench.py --tuning``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from flexserv_core import ModelLoadError, ModelSpec
from flexserv_ocr.kinds import Box, OcrLine, OcrModel


def rapidocr_params(max_side: int) -> dict[str, Any]:
    return {"Det.limit_type": "max", "Det.limit_side_len": max_side, "Global.log_level": "warning"}


def make_engine(params: dict[str, Any] | None) -> Any:
    """A RapidOCR engine on its bundled models (``params=None``: RapidOCR's defaults)."""
    try:
        from rapidocr import RapidOCR
    except ImportError as exc:
        raise ModelLoadError(f"RapidOCR is not installed ({exc}); pip install rapidocr onnxruntime.") from None
    return RapidOCR(params=params) if params else RapidOCR()


def lines_from_output(output: Any) -> list[OcrLine]:
    """RapidOCR's output (``boxes``: N quadrilaterals, ``txts``, ``scores``) as lines."""
    boxes = getattr(output, "boxes", None)
    if boxes is None:
        return []
    lines = []
    for quad, text, score in zip(boxes, output.txts, output.scores, strict=True):
        points = np.asarray(quad, dtype=float)
        xs, ys = points[:, 0], points[:, 1]
        lines.append(
            OcrLine(
                text=str(text),
                confidence=float(score),
                box=Box(x1=float(xs.min()), y1=float(ys.min()), x2=float(xs.max()), y2=float(ys.max())),
            )
        )
    return lines


class RapidOcrModel(OcrModel):
    def __init__(self, spec: ModelSpec, *, max_side: int, max_batch: int, max_wait: float) -> None:
        super().__init__(spec, max_batch=max_batch, max_wait=max_wait)
        self.engine = make_engine(rapidocr_params(max_side))
        # RapidOCR logs every call at INFO through its own logger; keep the server's log readable
        logging.getLogger("RapidOCR").setLevel(logging.WARNING)

    def read_page(self, image: Any, languages: list[str] | None) -> list[OcrLine]:
        import cv2  # RapidOCR's own dependency

        # RapidOCR takes OpenCV's BGR channel order for arrays: one pass over the pixels
        # (no RGB copy of an RGB page, no strided flip then a contiguous copy)
        rgb = np.asarray(image if image.mode == "RGB" else image.convert("RGB"))
        return lines_from_output(self.engine(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)))

    def unload(self) -> None:
        super().unload()
        self.engine = None
