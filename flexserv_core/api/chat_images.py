"""The image parts of a chat request: refused for text-only models, else loaded.

Called by the text session once the request's model is known (its lease held)
and before the prompt is rendered: :func:`load_images` checks the model's
``limits.max_images`` (a 400 naming the model when it takes no images), loads
every image (:mod:`.image_input`) and returns them by position, an argument of
the plan (:func:`~flexserv_core.api.text_request.chat_plan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexserv_core.api.image_input import ImageSettings, load_image
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
    model: TextGenerationModel, spec: ModelSpec, messages: Sequence[Any], context: RequestContext
) -> Images:
    """The request's images by position (empty without image parts)."""
    parts = image_parts(messages)
    if not parts:
        return {}
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
            param=f"messages[{i}].content[{j}]",
            code="too_many_images",
        )
    settings = context.server.settings.get(ImageSettings)
    images: dict[tuple[int, int], ImageInput] = {}
    for i, j, url in parts:
        param = f"messages[{i}].content[{j}].image_url"
        if not url:
            raise InvalidRequest(
                "An image_url part needs 'image_url': {'url': ...}.", param=param, code="missing_required_parameter"
            )
        images[(i, j)] = await load_image(url, settings, f"{param}.url")
    return images
