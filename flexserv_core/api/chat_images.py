"""The image parts of a chat request: refused for text-only models, else loaded.

Called by the text session once the request's model is known (its lease held)
and before the prompt is rendered: :func:`load_images` checks the model's
``limits.max_images`` (a 400 naming the model when it takes no images), loads
every image through the ``flexserv_load_image`` hook (the first-party
``image-input`` plugin fetches and decodes) and returns them by position, an
argument of the plan (:func:`~flexserv_core.api.text_request.chat_plan`). With no
plugin implementing the hook (``-p no:image-input``), an image part is a 400
naming the plugin. An image that replaced a file part (a document's page image, see
:mod:`~flexserv_core.api.file_parts`) counts as one, and its errors name the file part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexserv_core import hooks
from flexserv_core.api.file_parts import Origins
from flexserv_core.backends.base import ImageInput, TextGenerationModel
from flexserv_core.errors import InvalidRequest
from flexserv_core.models.spec import ModelSpec
from flexserv_core.request_context import RequestContext

#: ``(message index, part index) -> image`` of one request.
Images = dict[tuple[int, int], ImageInput]


def image_parts(messages: Sequence[Any]) -> list[tuple[int, int, str | None]]:
    """``(message index, part index, url)`` of every ``image_url`` part, in order."""
    found: list[tuple[int, int, str | None]] = []
    for i, message in enumerate(messages):
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if part.type == "image_url":
                    found.append((i, j, part.image_url.url if part.image_url is not None else None))
    return found


async def load_images(
    model: TextGenerationModel,
    spec: ModelSpec,
    messages: Sequence[Any],
    context: RequestContext,
    origins: Origins | None = None,
) -> Images:
    """The request's images by position (empty without image parts); ``origins`` name
    the file parts that image parts replaced, for errors."""
    parts = image_parts(messages)
    if not parts:
        return {}
    origins = origins or {}
    i, j, _url = parts[0]
    limit = model.limits.max_images
    if limit == 0:
        raise InvalidRequest(
            f"Image input is not supported by the model '{spec.name}' (a text-only model); send text parts, or"
            " use a vision-language model.",
            param=f"messages[{i}].content[{j}]",
            code="image_input_not_supported",
        )
    if len(parts) > limit:
        i, j, _url = parts[limit]
        raise InvalidRequest(
            f"The request has {len(parts)} images; the model '{spec.name}' takes at most {limit} per request.",
            param=origins.get((i, j), f"messages[{i}].content[{j}]"),
            code="too_many_images",
        )
    if not hooks.implemented(context.server.pm, "flexserv_load_image"):
        raise InvalidRequest(
            "Image input is not available on this server: the 'image-input' plugin (flexserv-image-input) is not"
            " loaded. Install it or stop blocking it (-p no:image-input), or send text parts only.",
            param=f"messages[{i}].content[{j}]",
            code="image_input_unavailable",
        )
    images: dict[tuple[int, int], ImageInput] = {}
    for i, j, url in parts:
        param = f"messages[{i}].content[{j}].image_url"
        if not url:
            raise InvalidRequest(
                "An image_url part needs 'image_url': {'url': ...}.", param=param, code="missing_required_parameter"
            )
        url_param = origins.get((i, j), f"{param}.url")
        image = await hooks.load_image(url, url_param, context)
        if image is None:
            raise InvalidRequest(
                "No plugin of this server loads this image URL.", param=url_param, code="invalid_image_url"
            )
        images[(i, j)] = image
    return images
