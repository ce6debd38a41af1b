"""Hook implementations of the ``image-input`` plugin."""

from __future__ import annotations

import msgspec

from flexserv_core import ImageInput, RequestContext, hookimpl
from flexserv_image_input.load import ImageSettings, load_image


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [ImageSettings]


@hookimpl(trylast=True)
async def flexserv_load_image(url: str, param: str, context: RequestContext) -> ImageInput:
    """The general loader: runs after more specific plugins and never returns ``None``
    (a URL it cannot load is a 400 naming ``param``)."""
    return await load_image(url, context.server.settings.get(ImageSettings), param)
