"""A document's text for a language model: pages read (text layer or OCR), marked, bounded.

:func:`document_text` is what chat and Responses ``file`` content parts need
(``{"file_id": ...}`` or ``{"file_data": "data:...;base64,...", "filename": ...}``);
:func:`document_content` is what a vision-language model gets instead (page images of the
pages without a text layer); :func:`read_reference` also serves ``/v1/documents/extract``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from litestar import Request

from flexserv_core import ContextLengthExceeded, FlexServer, InvalidRequest
from flexserv_ocr.errors import EngineNotInstalled
from flexserv_ocr.files import file_bytes
from flexserv_ocr.images import png_encode
from flexserv_ocr.kinds import OCR, OcrModel
from flexserv_ocr.metrics import ocr_counters
from flexserv_ocr.pixels import pixel_budget
from flexserv_ocr.reader import DocumentReader, ReadAllowance, ReadDocument, ReadOptions, decode_base64
from flexserv_ocr.settings import OcrSettings


def page_marker(number: int, count: int) -> str:
    return f"--- page {number} of {count} ---"


def marked_text(doc: ReadDocument, total_pages: int | None = None) -> str:
    """Each page's text after a ``--- page N of M ---`` line."""
    count = total_pages or len(doc.pages)
    return "\n".join(
        f"{page_marker(number, count)}\n{page.text}" for page, number in zip(doc.pages, doc.numbers, strict=True)
    )


def _field(param: str, key: str) -> str:
    """The path of a reference's field: ``messages[0].content[1].file.file_id``, or ``file_id``
    for a reference that is the request body itself (``param`` empty)."""
    return f"{param}.{key}" if param else key


async def reference_bytes(request: Request[Any, Any, Any], reference: Mapping[str, Any], param: str) -> bytes:
    """The bytes a ``file`` reference names: ``file_id`` (the caller's upload) or ``file_data`` (base64 / ``data:``)."""
    limits = request.app.state.flexserv.settings.get(OcrSettings)
    file_id, file_data = reference.get("file_id"), reference.get("file_data")
    if (file_id is None) == (file_data is None):
        where = f"'{param}' needs" if param else "Send"
        raise InvalidRequest(f"{where} exactly one of 'file_id' or 'file_data'.", param=param or "file_id")
    if file_id is not None:
        field = _field(param, "file_id")
        if not isinstance(file_id, str):
            raise InvalidRequest(f"'{field}' must be a string.", param=field)
        return await file_bytes(request, file_id, limit=limits.ocr_max_input_bytes, param=field)
    field = _field(param, "file_data")
    if not isinstance(file_data, str):
        raise InvalidRequest(f"'{field}' must be a string.", param=field)
    return decode_base64(file_data, limits, field)


async def read_reference(
    request: Request[Any, Any, Any],
    reference: Mapping[str, Any],
    *,
    options: ReadOptions | None = None,
    ocr_model: str | None = None,
    param: str = "file",
    allowance: ReadAllowance | None = None,
) -> tuple[ReadDocument, str | None]:
    """Read the document a reference names: text layers where a PDF has them, the OCR
    model (default of kind ``ocr``) elsewhere. Returns the pages and the OCR model's name.

    ``param`` is the reference's path in the request (a chat part's
    ``messages[0].content[1].file``): an error in the document names it, an error in a
    field ``param.file_id``. An empty ``param`` is a reference that is the request body
    itself (``/v1/documents/extract``): errors name its ``file_id`` or ``file_data``."""
    from flexserv_core import until_disconnect

    server: FlexServer = request.app.state.flexserv
    limits = server.settings.get(OcrSettings)
    options = options or ReadOptions()
    data = await reference_bytes(request, reference, param)
    if not param:
        param = "file_id" if reference.get("file_id") is not None else "file_data"
    spec = server.catalog.get(ocr_model) if ocr_model else server.catalog.default(OCR)
    if options.page_images is not None and ocr_model is None:
        # nothing is OCRed (pages without a text layer become page images): no engine to load
        reader = DocumentReader(None, limits, options, allowance, pixel_budget(server))
        docs = await until_disconnect(request, reader.read_all([(data, param)]))
        name = spec.name if spec is not None and spec.kind == OCR else None
    else:
        if spec is None or spec.kind != OCR:
            raise EngineNotInstalled(f"OCR engine '{ocr_model}' is not installed on this server.", param="ocr_model")
        async with server.registry.acquire(spec.name, OcrModel) as lease:
            reader = DocumentReader(lease.model, limits, options, allowance, pixel_budget(server))
            docs = await until_disconnect(request, reader.read_all([(data, param)]))
        name = spec.name
    if name is not None:
        counts = ocr_counters(server.settings)  # pages read for chat and extraction count as /v1/ocr's do
        for page in docs[0].pages:
            counts.page_read(name, page.source, page.seconds)
    return docs[0], name


def check_chars(chars: int, pages: int, max_chars: int, param: str) -> None:
    """A 400 ``context_length_exceeded`` naming ``max_chars`` for a longer document."""
    if chars > max_chars:
        raise ContextLengthExceeded(
            f"The document's text is {chars} characters ({pages} pages); this model takes at most "
            f"{max_chars} characters of documents. Send fewer pages.",
            param=param,
        )


async def document_text(
    request: Request[Any, Any, Any],
    reference: Mapping[str, Any],
    *,
    max_chars: int,
    param: str = "file",
    allowance: ReadAllowance | None = None,
) -> str:
    """The text of the document ``reference`` names (an OpenAI ``file`` content part's
    ``file`` object: ``file_id`` or ``file_data``), pages after ``--- page N of M ---``
    markers; a 400 ``context_length_exceeded`` naming ``max_chars`` when it is longer.

    PDF pages with a text layer are read from it, other pages and images by the
    default OCR model. The file must be one the request's API key may read.
    ``param`` is the part's path in errors (``messages[0].content[1].file``)."""
    doc, _ = await read_reference(request, reference, param=param, allowance=allowance)
    text = marked_text(doc)
    check_chars(len(text), len(doc.pages), max_chars, param)
    return text


async def document_content(
    request: Request[Any, Any, Any],
    reference: Mapping[str, Any],
    *,
    max_chars: int,
    max_images: int,
    param: str = "file",
    allowance: ReadAllowance | None = None,
) -> str | list[str | bytes]:
    """What a vision-language model gets of the document ``reference`` names: pages with
    a text layer as text, the others (scanned PDF pages, an image file) as PNG page images
    (rendered at ``--ocr-default-dpi`` or less, within ``--ocr-page-image-max-pixels``),
    each page after its ``--- page N of M ---`` marker: text segments and PNG bytes, in
    order. At most ``max_images`` page images (``TooManyPageImages``, before any is
    rendered, when more pages need one); the text (markers included) is bounded by
    ``max_chars`` as :func:`document_text`'s is. A document whose pages all have a text
    layer is returned as :func:`document_text`'s ``str``, exactly."""
    options = ReadOptions(page_images=max_images)
    doc, _ = await read_reference(request, reference, options=options, param=param, allowance=allowance)
    parts: list[str | bytes] = []
    text = ""
    count = len(doc.pages)
    for position, (page, number) in enumerate(zip(doc.pages, doc.numbers, strict=True)):
        if position:
            text += "\n"
        text += page_marker(number, count) + "\n"
        image = doc.images.get(position)
        if image is None:
            text += page.text
            continue
        parts += [text, await asyncio.to_thread(png_encode, image)]
        text = ""
    if text:
        parts.append(text)
    check_chars(sum(len(part) for part in parts if isinstance(part, str)), count, max_chars, param)
    if not doc.images:
        return "".join(part for part in parts if isinstance(part, str))
    return parts
