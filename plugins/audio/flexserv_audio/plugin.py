"""Hook implementations of the ``audio`` plugin: OpenAI's audio routes and their settings."""

from __future__ import annotations

from typing import Any

import msgspec

from flexserv_audio import routes
from flexserv_audio.metrics import audio_seconds
from flexserv_audio.schemas import TranscriptionSettings
from flexserv_core import Settings, hookimpl


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [TranscriptionSettings]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return routes.routes(settings)


@hookimpl
def flexserv_metrics_collectors(settings: Settings) -> list[Any]:
    return [audio_seconds(settings)]
