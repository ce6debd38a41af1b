"""The ``file`` parts of a chat request, turned into text and image parts by a plugin.

OpenAI's chat API sends a document as ``{"type": "file", "file": {"file_id": ...}}``
or ``{"type": "file", "file": {"file_data": ..., "filename": ...}}`` (the Responses
plugin turns ``input_file`` parts into these). The core reads no document itself:
once the request's model is known (its lease held), and before the images are
loaded and the prompt is planned, the text session and ``/tokenize`` ask the
``flexserv_expand_file_parts`` hook (the first-party ``ocr`` plugin) for the text
and ``image_url`` parts that replace each file part. From there they are served as
the client's own parts: images loaded through ``flexserv_load_image`` under the same
limits, every token checked against the context. An error about a part that
replaced a file part names the file part (:data:`Origins`). Without a plugin
implementing the hook (``-p no:ocr``), a file part is a 400 naming the plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from flexserv_core import hooks
from flexserv_core.errors import InvalidRequest

if TYPE_CHECKING:
    from flexserv_core.api.text_schemas import ChatMessage, ContentPart
    from flexserv_core.backends.base import TextGenerationModel
    from flexserv_core.request_context import RequestContext

#: ``(message index, part index) -> param`` of each part that replaced a file part:
#: the file part's path, which errors about it name.
Origins = dict[tuple[int, int], str]


async def expand_file_parts(
    model: TextGenerationModel, messages: list[ChatMessage], context: RequestContext, *, images: bool
) -> tuple[list[ChatMessage], Origins]:
    """The messages with every file part replaced by the plugin's parts (the same list
    when there is none), and where those parts came from. ``images``: whether the route
    renders images (``/tokenize`` does not)."""
    files = [
        (i, j)
        for i, message in enumerate(messages)
        if isinstance(message.content, list)
        for j, part in enumerate(message.content)
        if part.type == "file"
    ]
    if not files:
        return messages, {}
    pm = context.server.pm
    if not hooks.implemented(pm, "flexserv_expand_file_parts"):
        i, j = files[0]
        raise InvalidRequest(
            "Document input is not available on this server: no plugin reads 'file' content parts. Install the"
            " 'ocr' plugin (flexserv-ocr, pip install ./plugins/ocr) or stop blocking it (-p no:ocr), or send the"
            " document's text as a text part.",
            param=f"messages[{i}].content[{j}]",
            code="document_input_unavailable",
        )
    images = images and model.limits.max_images > 0 and hooks.implemented(pm, "flexserv_load_image")
    expanded = await hooks.expand_file_parts(msgspec.to_builtins(messages), model, images, context)
    out, origins = list(messages), Origins()
    for i in dict.fromkeys(i for i, _ in files):
        parts = messages[i].content
        assert isinstance(parts, list)
        content: list[ContentPart] = []
        for j, part in enumerate(parts):
            if part.type != "file":
                content.append(part)
                continue
            param = f"messages[{i}].content[{j}].file"
            if (i, j) not in expanded:
                raise InvalidRequest("No plugin of this server reads this file.", param=param, code="invalid_file")
            for piece in expanded[(i, j)]:
                origins[(i, len(content))] = param
                content.append(piece)
        out[i] = msgspec.structs.replace(messages[i], content=content)
    return out, origins
