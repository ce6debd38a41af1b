"""FlexServ plugin: OCR as a model kind, PDF text layers and page rendering, ``POST /v1/ocr``."""

__version__ = "0.1.0"
