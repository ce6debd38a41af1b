"""A plugin module for Ray tests: the testing kit's fake text backend, with its
token delay as a setting so that it reaches every replica with the others.

Replicas import it by name (``-p ray_fake_backend``): the tests put this
directory on the ``PYTHONPATH`` of the Ray cluster they start.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from flexserv_core import Settings, hookimpl
from flexserv_core.testing import FakeTextBackend


class FakeRaySettings(msgspec.Struct, kw_only=True):
    fake_token_delay: Annotated[float, msgspec.Meta(ge=0, description="Seconds per fake token.")] = 0.0


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return FakeRaySettings


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[FakeTextBackend]:
    return [FakeTextBackend(token_delay=settings.get(FakeRaySettings).fake_token_delay)]
