"""The document parts of a chat request: read as text for the prompt, within the context.

OpenAI's chat API sends a document as ``{"type": "file", "file": {"file_id": ...}}``
(an upload of ``/v1/files``) or ``{"type": "file", "file": {"file_data":
"data:application/pdf;base64,...", "filename": ...}}``; the Responses plugin turns
its ``input_file`` parts into these. Called by the text session once the request's
model is known (its lease held), before images are loaded and the prompt is
rendered: :func:`load_documents` reads every document through the
``flexserv_load_document`` hook (the first-party ``ocr`` plugin: PDF text layers,
OCR elsewhere) and returns its text by position, an argument of the plan
(:func:`~flexserv_core.api.text_request.chat_plan`), where it replaces the part.

For a model that takes images (``limits.max_images`` above 0, an image plugin
loaded, ``--max-document-page-images`` above 0), the hook may return a
:class:`~flexserv_core.DocumentContent` instead: pages without a text layer (scans,
image files) as page images between the text segments. Each page image is loaded
through ``flexserv_load_image`` as an ``image_url`` part's image is (the same
limits), and the request's page images are bounded by the lesser of
``--max-document-page-images`` and the model's images per request less its
``image_url`` parts (a 400 ``too_many_page_images`` naming the limit that binds).
``/tokenize`` reads documents as text (``images=False``): it takes no images.

The documents' text is bounded by the model's context before any is read in full:
each document may take what earlier ones left of ``context_length x``
:data:`CHARS_PER_TOKEN` characters (a 400 ``context_length_exceeded`` naming the
limit), and the rendered prompt's tokens are checked against the context as every
prompt's are. Without a plugin implementing the hook (``-p no:ocr``), a file part
is a 400 naming the plugin to install.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from flexserv_core import hooks
from flexserv_core.api.chat_images import image_parts
from flexserv_core.backends.base import ImageInput, TextGenerationModel
from flexserv_core.documents import DocumentContent, TooManyPageImages
from flexserv_core.errors import ContextLengthExceeded, InvalidRequest
from flexserv_core.request_context import RequestContext

#: ``(message index, part index) -> the document`` of one request: its text, or (for a
#: model that takes images) its text segments and loaded page images in order.
Documents = dict[tuple[int, int], str | list[str | ImageInput]]

#: Characters a token of the context stands for when documents are bounded before
#: they are tokenized. Generous on purpose (English prose is ~4): this bound only
#: stops a document that cannot fit from being read whole; the prompt's tokens are
#: the exact check.
CHARS_PER_TOKEN = 6


def document_parts(messages: Sequence[Any]) -> list[tuple[int, int, Any]]:
    """``(message index, part index, part)`` of every ``file`` part, in order."""
    found: list[tuple[int, int, Any]] = []
    for i, message in enumerate(messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type == "file":
                    found.append((i, j, part))
    return found


async def load_documents(
    model: TextGenerationModel,
    messages: Sequence[Any],
    context: RequestContext,
    *,
    images: bool = True,
) -> Documents:
    """The request's documents by position (empty without file parts): text, or for a
    model that takes images (and ``images``), text and page images."""
    parts = document_parts(messages)
    if not parts:
        return {}
    i, j, _part = parts[0]
    pm = context.server.pm
    if not hooks.implemented(pm, "flexserv_load_document"):
        raise InvalidRequest(
            "Document input is not available on this server: no plugin reads 'file' content parts. Install the"
            " 'ocr' plugin (flexserv-ocr, pip install ./plugins/ocr) or stop blocking it (-p no:ocr), or send the"
            " document's text as a text part.",
            param=f"messages[{i}].content[{j}]",
            code="document_input_unavailable",
        )
    budget = _PageImageBudget.of(model, messages, context) if images else None
    limit = model.limits.context_length * CHARS_PER_TOKEN
    left = limit
    documents: Documents = {}
    for i, j, part in parts:
        param = f"messages[{i}].content[{j}].file"
        if part.file is None:
            raise InvalidRequest(
                "A file part needs 'file': {'file_id': ...} or {'file_data': ..., 'filename': ...}.",
                param=param,
                code="missing_required_parameter",
            )
        if left <= 0:
            raise _too_long(limit, model, param)
        max_images = budget.left if budget is not None else 0
        try:
            content = await hooks.load_document(
                msgspec.to_builtins(part.file),
                param,
                left,
                context,
                images_allowed=budget is not None,
                max_images=max_images,
            )
        except TooManyPageImages as exc:
            assert budget is not None  # the hook is told images_allowed=False otherwise
            raise budget.exceeded(exc.needed, param) from None
        if content is None:
            raise InvalidRequest("No plugin of this server reads this file.", param=param, code="invalid_file")
        if isinstance(content, str):
            chars = len(content)
        else:
            chars = content.text_chars
            assert budget is not None  # hooks.load_document refuses a DocumentContent otherwise
            if len(content.images) > max_images:  # a plugin that ignored its bound
                raise budget.exceeded(len(content.images), param)
        if chars > left:  # a plugin that ignored its bound
            raise _too_long(limit, model, param)
        if isinstance(content, str):
            documents[(i, j)] = content
        else:
            assert budget is not None
            budget.spend(len(content.images))
            documents[(i, j)] = await _load_page_images(content, param, context)
        left -= chars
    return documents


async def _load_page_images(content: DocumentContent, param: str, context: RequestContext) -> list[str | ImageInput]:
    """The document's parts with each page image loaded as an ``image_url`` part's image is
    (through ``flexserv_load_image``, under the same limits)."""
    out: list[str | ImageInput] = []
    for part in content.parts:
        if isinstance(part, str):
            if part:
                out.append(part)
            continue
        url = f"data:{part.media_type};base64,{base64.b64encode(part.data).decode()}"
        image = await hooks.load_image(url, param, context)
        if image is None:
            page = f"page {part.page}" if part.page is not None else "a page"
            raise InvalidRequest(
                f"No plugin of this server loads the image of {page} of this document.",
                param=param,
                code="invalid_file",
            )
        out.append(image)
    return out


@dataclass
class _PageImageBudget:
    """The page images a request's documents may still bring: the lesser of what
    ``--max-document-page-images`` and the model's images per request (less the
    request's ``image_url`` parts) leave."""

    model_name: str
    setting: int
    model_limit: int
    image_parts: int
    used: int = 0

    @classmethod
    def of(
        cls, model: TextGenerationModel, messages: Sequence[Any], context: RequestContext
    ) -> _PageImageBudget | None:
        """``None`` when documents go as text only: a text-only model, no image plugin,
        or ``--max-document-page-images 0``."""
        setting = context.server.settings.core.max_document_page_images
        if model.limits.max_images <= 0 or setting <= 0:
            return None
        if not hooks.implemented(context.server.pm, "flexserv_load_image"):
            return None
        return cls(model.spec.name, setting, model.limits.max_images, len(image_parts(messages)))

    @property
    def left(self) -> int:
        return max(0, min(self.setting, self.model_limit - self.image_parts) - self.used)

    def spend(self, count: int) -> None:
        self.used += count

    def exceeded(self, needed: int, param: str) -> InvalidRequest:
        total = self.used + needed
        if self.setting <= self.model_limit - self.image_parts:
            why = f"this server sends at most {self.setting} per request (--max-document-page-images)"
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
