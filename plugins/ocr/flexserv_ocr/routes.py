"""``POST /v1/ocr`` (also ``/v1/vision/ocr``): text per page with lines, boxes and confidences.

The response is the source runtime's shape (``data[i]``: ``index``, ``text``,
``confidence``, ``boxes`` with ``return_boxes``) extended with ``pages``: each
page's number, size in pixels, ``source`` (``ocr`` or ``text_layer``), text,
and lines in reading order.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, post

from flexserv_core import FlexServer, open_request_context, parse_body, until_disconnect
from flexserv_ocr.errors import EngineNotInstalled, TooManyPages
from flexserv_ocr.files import file_bytes
from flexserv_ocr.kinds import OCR, OcrModel, OcrPage
from flexserv_ocr.metrics import ocr_counters
from flexserv_ocr.pixels import pixel_budget
from flexserv_ocr.reader import DocumentReader, ReadDocument, ReadOptions, decode_base64
from flexserv_ocr.settings import OcrSettings

OCR_ENDPOINTS = ["/v1/ocr", "/v1/vision/ocr"]


class OcrRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    #: Images as base64 or ``data:`` URLs (PDFs are accepted here too).
    images: list[str] | None = None
    #: One image or PDF as base64 or a ``data:`` URL.
    file: str | None = None
    #: A file uploaded to ``/v1/files``.
    file_id: str | None = None
    #: 1-based PDF page numbers: ``[1, 3]`` or ``"1-3,5"``; all pages when left out.
    pages: list[int] | str | None = None
    dpi: int | None = None
    languages: list[str] | None = None
    return_boxes: bool = False
    #: OCR PDF pages even when they have a text layer.
    force_ocr: bool = False


def server_of(request: Request[Any, Any, Any]) -> FlexServer:
    server: FlexServer = request.app.state.flexserv
    return server


def ocr_models(server: FlexServer) -> list[str]:
    return sorted(spec.name for spec in server.catalog.specs() if spec.kind == OCR)


def resolve_engine(server: FlexServer, name: str | None) -> str:
    """The catalog name of the OCR model asked for; 400 naming the installed ones otherwise
    (the source runtime's ``surya``, ``easyocr`` and ``paddleocr`` are not served here)."""
    installed = ocr_models(server)
    if name is None:
        default = server.catalog.default(OCR)
        if default is None:
            raise EngineNotInstalled("No OCR engine is installed: pip install rapidocr onnxruntime.", param="model")
        return default.name
    spec = server.catalog.get(name)
    if spec is None or spec.kind != OCR:
        raise EngineNotInstalled(
            f"OCR engine '{name[:100]}' is not installed on this server; installed: {', '.join(installed) or 'none'}.",
            param="model",
        )
    return spec.name


def _inputs(body: OcrRequest, limits: OcrSettings) -> list[tuple[str, str]]:
    given = [name for name in ("images", "file", "file_id") if getattr(body, name) is not None]
    if len(given) != 1:
        raise_one_of(given)
    if body.images is not None:
        if not body.images:
            raise_one_of([])
        if len(body.images) > limits.ocr_max_pages:
            # each image is a page at least: refused before any is decoded
            raise TooManyPages(
                f"'images' has {len(body.images)} images; this server reads at most {limits.ocr_max_pages} pages "
                "per request (--ocr-max-pages).",
                param="images",
            )
        return [(value, f"images[{i}]") for i, value in enumerate(body.images)]
    if body.file is not None:
        return [(body.file, "file")]
    return []


def raise_one_of(given: list[str]) -> None:
    from flexserv_core import InvalidRequest

    what = "none" if not given else " and ".join(f"'{g}'" for g in given)
    raise InvalidRequest(
        f"Send exactly one of 'images', 'file' or 'file_id' (got {what}).",
        param="images" if not given else given[-1],
        code="invalid_input",
    )


def page_json(page: OcrPage, number: int) -> dict[str, Any]:
    return {
        "page": number,
        "width": page.width,
        "height": page.height,
        "source": page.source,
        "text": page.text,
        "confidence": round(page.confidence, 4),
        "lines": [
            {"text": line.text, "confidence": round(line.confidence, 4), "box": msgspec.to_builtins(line.box)}
            for line in page.lines
        ],
    }


def document_json(index: int, doc: ReadDocument, return_boxes: bool) -> dict[str, Any]:
    lines = [line for page in doc.pages for line in page.lines]
    item: dict[str, Any] = {
        "index": index,
        "text": "\n\n".join(page.text for page in doc.pages),
        "confidence": round(sum(line.confidence for line in lines) / len(lines), 4) if lines else 0.0,
        "media_type": doc.media_type,
        "pages": [page_json(page, number) for page, number in zip(doc.pages, doc.numbers, strict=True)],
    }
    if return_boxes:
        item["boxes"] = [
            {**msgspec.to_builtins(line.box), "text": line.text, "confidence": round(line.confidence, 4)}
            for line in lines
        ]
    return item


@post(
    OCR_ENDPOINTS,
    status_code=200,
    summary="Read the text of images and PDFs",
    opt={"body": OcrRequest, "scope": "inference"},
)
async def ocr(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    limits = server.settings.get(OcrSettings)
    body = await parse_body(request, OcrRequest, open_request_context(request, request.url.path))
    encoded = _inputs(body, limits)
    name = resolve_engine(server, body.model)
    if body.file_id is not None:
        inputs = [(await file_bytes(request, body.file_id, limit=limits.ocr_max_input_bytes), "file_id")]
    else:
        inputs = [(decode_base64(value, limits, param), param) for value, param in encoded]
    options = ReadOptions(pages=body.pages, dpi=body.dpi, languages=body.languages, force_ocr=body.force_ocr)
    async with server.registry.acquire(name, OcrModel) as lease:
        reader = DocumentReader(lease.model, limits, options, pixels=pixel_budget(server))
        docs = await until_disconnect(request, reader.read_all(inputs))
    counts = ocr_counters(server.settings)
    for doc in docs:
        for page in doc.pages:
            counts.page_read(name, page.source, page.seconds)
    pages = [page for doc in docs for page in doc.pages]
    return {
        "object": "list",
        "model": name,
        "data": [document_json(i, doc, body.return_boxes) for i, doc in enumerate(docs)],
        "usage": {
            "images_processed": len(docs),
            "total_images": len(docs),
            "pages": len(pages),
            "pages_ocr": sum(1 for page in pages if page.source == "ocr"),
            "pages_text_layer": sum(1 for page in pages if page.source == "text_layer"),
            "ocr_seconds": round(sum(page.seconds for page in pages), 3),
        },
    }


ROUTES = [ocr]
