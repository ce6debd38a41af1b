"""Hooks of the llama.cpp plugin: its settings and its backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from flexserv_core import hookimpl
from flexserv_llamacpp.backend import LlamaCppBackend
from flexserv_llamacpp.settings import LlamaCppSettings

if TYPE_CHECKING:
    from flexserv_core import Backend, Settings


@hookimpl
def flexserv_add_settings() -> list[type[msgspec.Struct]]:
    return [LlamaCppSettings]


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    return [LlamaCppBackend(settings)]
