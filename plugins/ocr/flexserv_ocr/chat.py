"""Chat and Responses ``file`` parts: each document's text (and page images) in its place.

The plugin's ``flexserv_expand_file_parts``: the core hands it a request's messages
once the model is known and serves what comes back as the client's own parts. Every
file part is read (:func:`~flexserv_ocr.documents.document_text`: text layers, OCR
elsewhere, pages after ``--- page N of M ---`` markers) and replaced by its text, set
off from the text around it by blank lines. For a model that takes images (the core's
``images``) pages without a text layer go as PNG page images instead
(:func:`~flexserv_ocr.documents.document_content`), ``image_url`` parts the core loads
as it loads the client's (the image-input plugin's limits).

Bounds, for the request's documents together:

* text: ``context_length x`` :data:`CHARS_PER_TOKEN` characters, each document what
  the earlier ones left, checked before a longer one is read whole (a 400
  ``context_length_exceeded`` naming the limit); the core then checks the rendered
  prompt's tokens against the context as it checks every prompt's;
* page images: the lesser of ``--ocr-max-page-images`` and the model's images per
  request less the request's ``image_url`` parts (a 400 ``too_many_page_images``
  naming the limit that binds, before any page is rendered).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from litestar import Request

from flexserv_core import ContextLengthExceeded, InvalidRequest, RequestContext, TextGenerationModel
from flexserv_ocr.documents import document_content, document_text
from flexserv_ocr.errors import TooManyPageImages
from flexserv_ocr.reader import ReadAllowance
from flexserv_ocr.settings import OcrSettings

#: Characters a token of the context stands for when documents are bounded before
#: they are tokenized. Generous on purpose (English prose is ~4): this bound only
#: stops a document that cannot fit from being read whole; the prompt's tokens are
#: the exact check.
CHARS_PER_TOKEN = 6

#: ``(message index, part index) -> parts`` that replace the request's file parts.
Expanded = dict[tuple[int, int], list[dict[str, Any]]]


async def read_document(
    request: Request[Any, Any, Any],
    file: dict[str, Any],
    *,
    param: str,
    max_chars: int,
    max_images: int | None,
    allowance: ReadAllowance,
) -> str | list[str | bytes]:
    """A document's text, or (``max_images`` not ``None``) its text segments and PNG page images."""
    if max_images is None:
        return await document_text(request, file, max_chars=max_chars, param=param, allowance=allowance)
    return await document_content(
        request, file, max_chars=max_chars, max_images=max_images, param=param, allowance=allowance
    )


async def expand_file_parts(
    messages: list[dict[str, Any]], model: TextGenerationModel, images: bool, context: RequestContext
) -> Expanded | None:
    """Every file part's replacement, read in order within the request's bounds."""
    if context.request is None:  # no client, so no API key to read files as
        return None
    setting = context.server.settings.get(OcrSettings).ocr_max_page_images
    budget = _PageImageBudget.of(model, messages, setting) if images and setting > 0 else None
    limit = model.limits.context_length * CHARS_PER_TOKEN
    left = limit
    allowance = ReadAllowance(context.server.settings.get(OcrSettings))  # pages and OCR time, all parts together
    read: dict[tuple[int, int], list[str | bytes]] = {}
    for i, j, part in _file_parts(messages):
        param = f"messages[{i}].content[{j}].file"
        if not isinstance(part.get("file"), dict):
            raise InvalidRequest(
                "A file part needs 'file': {'file_id': ...} or {'file_data': ..., 'filename': ...}.",
                param=param,
                code="missing_required_parameter",
            )
        if left <= 0:
            raise _too_long(limit, model, param)
        max_images = budget.left if budget is not None else None
        try:
            document = await read_document(
                context.request, part["file"], param=param, max_chars=left, max_images=max_images, allowance=allowance
            )
        except TooManyPageImages as exc:
            assert budget is not None  # only a reading with page images raises it
            raise budget.exceeded(exc.needed, param) from None
        pieces: list[str | bytes] = [document] if isinstance(document, str) else document
        chars = sum(len(piece) for piece in pieces if isinstance(piece, str))
        if chars > left:  # a reader that ignored its bound
            raise _too_long(limit, model, param)
        if budget is not None:
            budget.used += len(pieces) - sum(isinstance(piece, str) for piece in pieces)
        read[(i, j)] = pieces
        left -= chars
    return _spliced(messages, read)


def _file_parts(messages: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """``(message index, part index, part)`` of every ``file`` part, in order."""
    return [
        (i, j, part)
        for i, message in enumerate(messages)
        if isinstance(message.get("content"), list)
        for j, part in enumerate(message["content"])
        if part.get("type") == "file"
    ]


def _spliced(messages: list[dict[str, Any]], read: dict[tuple[int, int], list[str | bytes]]) -> Expanded:
    """The read documents as content parts, a blank line between a document's text and
    text next to it (on the document's side, so the client's parts stay as sent)."""
    out: Expanded = {key: [] for key in read}
    for i in dict.fromkeys(i for i, _ in read):
        # the message as the model will see it: (document or None for the client's part, text or not)
        flat: list[tuple[tuple[int, int] | None, str | bytes | None]] = []
        for j, part in enumerate(messages[i]["content"]):
            if (i, j) in read:
                flat += [((i, j), piece) for piece in read[(i, j)]]
            else:
                flat.append((None, part.get("text") if part.get("type") == "text" else None))
        for k, (key, piece) in enumerate(flat):
            if key is None:
                continue
            if isinstance(piece, bytes):
                url = f"data:image/png;base64,{base64.b64encode(piece).decode()}"
                out[key].append({"type": "image_url", "image_url": {"url": url}})
                continue
            text = piece or ""
            before = flat[k - 1][1] if k else None
            after = flat[k + 1] if k + 1 < len(flat) else (key, None)
            if text and isinstance(before, str) and before:
                text = "\n\n" + text
            if piece and after[0] is None and isinstance(after[1], str) and after[1]:
                text += "\n\n"  # the next document's own text takes the blank line before it
            out[key].append({"type": "text", "text": text})
    return out


@dataclass
class _PageImageBudget:
    """The page images a request's documents may still bring: the lesser of what
    ``--ocr-max-page-images`` and the model's images per request (less the
    request's ``image_url`` parts) leave."""

    model_name: str
    setting: int
    model_limit: int
    image_parts: int
    used: int = 0

    @classmethod
    def of(cls, model: TextGenerationModel, messages: list[dict[str, Any]], setting: int) -> _PageImageBudget:
        image_parts = sum(
            part.get("type") == "image_url"
            for message in messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
        )
        return cls(model.spec.name, setting, model.limits.max_images, image_parts)

    @property
    def left(self) -> int:
        return max(0, min(self.setting, self.model_limit - self.image_parts) - self.used)

    def exceeded(self, needed: int, param: str) -> InvalidRequest:
        total = self.used + needed
        if self.setting <= self.model_limit - self.image_parts:
            why = f"this server sends at most {self.setting} per request (--ocr-max-page-images)"
        else:
            why = f"the model '{self.model_name}' takes at most {self.model_limit} images per request"
            if self.image_parts:
                why += f", {self.image_parts} of them taken by the request's image parts"
        return InvalidRequest(
            f"The request's documents have {total} pages without a text layer, which go to the model as page "
            f"images; {why}. Send fewer pages (or the pages' text).",
            param=param,
            code="too_many_page_images",
        )


def _too_long(limit: int, model: TextGenerationModel, param: str) -> ContextLengthExceeded:
    return ContextLengthExceeded(
        f"The request's documents take more than {limit} characters, more than the model's context of "
        f"{model.limits.context_length} tokens holds ({CHARS_PER_TOKEN} characters a token at most). Send fewer "
        "or shorter documents.",
        param=param,
    )
