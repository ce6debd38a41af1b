"""Hook implementations of the ``ocr`` plugin."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.types import ControllerRouterHandler

from flexserv_core import Backend, FlexServer, ModelSpec, RequestContext, Settings, TextGenerationModel, hookimpl
from flexserv_ocr import chat, extract, routes
from flexserv_ocr.backends import RapidOcrBackend, TesseractBackend, offered_models
from flexserv_ocr.kinds import OCR
from flexserv_ocr.metrics import ocr_counters
from flexserv_ocr.settings import OcrSettings


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return OcrSettings


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    options = settings.get(OcrSettings)
    return [RapidOcrBackend(options), TesseractBackend(options)]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[ControllerRouterHandler]:
    return [*routes.ROUTES, extract.extract]


@hookimpl
def flexserv_default_models(settings: Settings) -> list[ModelSpec]:
    return offered_models()


@hookimpl
def flexserv_metrics_collectors(settings: Settings) -> list[Any]:
    return list(ocr_counters(settings))


@hookimpl
def flexserv_health(server: FlexServer) -> dict[str, Any]:
    spec = server.catalog.default(OCR)
    if spec is None:
        return {"ocr_model": None}
    return {"ocr_model": {"model_id": spec.name, "state": server.registry.state_of(spec.name).value}}


@hookimpl
async def flexserv_expand_file_parts(
    messages: list[dict[str, Any]], model: TextGenerationModel, images: bool, context: RequestContext
) -> dict[tuple[int, int], list[dict[str, Any]]] | None:
    """Chat and Responses ``file`` parts: the document's text (text layer or OCR), pages
    marked; for a model that takes images, pages without a text layer as page images."""
    return await chat.expand_file_parts(messages, model, images, context)
