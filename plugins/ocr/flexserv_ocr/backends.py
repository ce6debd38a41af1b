"""The OCR backends: RapidOCR (bundled models, the default) and Tesseract (when installed)."""

from __future__ import annotations

from flexserv_core import Backend, ModelLoadError, ModelSpec, ProgressCallback
from flexserv_ocr.kinds import OCR, OcrModel
from flexserv_ocr.settings import OcrSettings
from flexserv_ocr.tesseract import tesseract_binary


def rapidocr_installed() -> bool:
    from importlib.util import find_spec

    return find_spec("rapidocr") is not None and find_spec("onnxruntime") is not None


class RapidOcrBackend(Backend):
    name = "rapidocr"
    kind = OCR

    def __init__(self, settings: OcrSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        return spec.source == "rapidocr"

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> OcrModel:
        from flexserv_ocr.rapid import RapidOcrModel

        progress("loading RapidOCR's bundled detection and recognition models", None)
        max_side = int(spec.options.get("max_side", self.settings.ocr_rapidocr_max_side))
        return RapidOcrModel(
            spec,
            max_side=max_side,
            max_batch=self.settings.ocr_max_batch,
            max_wait=self.settings.ocr_max_wait_ms / 1000,
        )


class TesseractBackend(Backend):
    name = "tesseract"
    kind = OCR

    def __init__(self, settings: OcrSettings) -> None:
        self.settings = settings

    def accepts(self, spec: ModelSpec) -> bool:
        return spec.source == "tesseract"

    def load(self, spec: ModelSpec, progress: ProgressCallback) -> OcrModel:
        from flexserv_ocr.tesseract import TesseractModel

        binary = tesseract_binary()
        if binary is None:
            raise ModelLoadError(
                "Tesseract is not installed: install Debian's tesseract-ocr and tesseract-ocr-eng "
                "(make setup does), or use the rapidocr model."
            )
        return TesseractModel(
            spec, binary, max_batch=self.settings.ocr_max_batch, max_wait=self.settings.ocr_max_wait_ms / 1000
        )


def offered_models() -> list[ModelSpec]:
    """RapidOCR (the default) when its packages are installed; Tesseract when its binary is."""
    specs = []
    if rapidocr_installed():
        specs.append(ModelSpec(name="rapidocr", kind=OCR, source="rapidocr", backend="rapidocr", origin="embedded"))
    if tesseract_binary() is not None:
        specs.append(
            ModelSpec(
                name="tesseract",
                kind=OCR,
                source="tesseract",
                backend="tesseract",
                origin="embedded",
                may_be_default=False,
            )
        )
    return specs
