"""Loading a Responses request's images: the chat path's, with errors renamed to ``input...``."""

from __future__ import annotations

from flexserv_core.api.chat_images import attach_images
from flexserv_core.api.responses.request import ResponsePlan, responses_param
from flexserv_core.backends.base import TextGenerationModel
from flexserv_core.errors import FlexServError
from flexserv_core.models.spec import ModelSpec
from flexserv_core.request_context import RequestContext


async def attach_input_images(
    model: TextGenerationModel, spec: ModelSpec, plan: ResponsePlan, context: RequestContext
) -> None:
    """Check the model takes images and load them (see :func:`attach_images`)."""
    try:
        await attach_images(model, spec, plan.chat.messages, context)
    except FlexServError as exc:
        raise responses_param(exc) from None
