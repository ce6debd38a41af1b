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

The documents' text is bounded by the model's context before any is read in full:
each document may take what earlier ones left of ``context_length x``
:data:`CHARS_PER_TOKEN` characters (a 400 ``context_length_exceeded`` naming the
limit), and the rendered prompt's tokens are checked against the context as every
prompt's are. Without a plugin implementing the hook (``-p no:ocr``), a file part
is a 400 naming the plugin to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from flexserv_core import hooks
from flexserv_core.backends.base import TextGenerationModel
from flexserv_core.errors import ContextLengthExceeded, InvalidRequest
from flexserv_core.request_context import RequestContext

#: ``(message index, part index) -> the document's text`` of one request.
Documents = dict[tuple[int, int], str]

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


async def load_documents(model: TextGenerationModel, messages: Sequence[Any], context: RequestContext) -> Documents:
    """The request's documents' text by position (empty without file parts)."""
    parts = document_parts(messages)
    if not parts:
        return {}
    i, j, _part = parts[0]
    if not hooks.implemented(context.server.pm, "flexserv_load_document"):
        raise InvalidRequest(
            "Document input is not available on this server: no plugin reads 'file' content parts. Install the"
            " 'ocr' plugin (flexserv-ocr, pip install ./plugins/ocr) or stop blocking it (-p no:ocr), or send the"
            " document's text as a text part.",
            param=f"messages[{i}].content[{j}]",
            code="document_input_unavailable",
        )
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
        text = await hooks.load_document(msgspec.to_builtins(part.file), param, left, context)
        if text is None:
            raise InvalidRequest("No plugin of this server reads this file.", param=param, code="invalid_file")
        if len(text) > left:  # a plugin that ignored its bound
            raise _too_long(limit, model, param)
        documents[(i, j)] = text
        left -= len(text)
    return documents


def _too_long(limit: int, model: TextGenerationModel, param: str) -> ContextLengthExceeded:
    return ContextLengthExceeded(
        f"The request's documents take more than {limit} characters, more than the model's context of "
        f"{model.limits.context_length} tokens holds ({CHARS_PER_TOKEN} characters a token at most). Send fewer "
        "or shorter documents.",
        param=param,
    )
