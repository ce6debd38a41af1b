"""The ``docs`` plugin: serves the API schema and the Swagger UI page built from it.

Blocked (``-p no:docs``), ``/openapi.json``, ``/openapi.yaml`` and ``/docs`` answer
404 and every other route works as before.
"""

from __future__ import annotations

from typing import Any

from flexserv_core import Settings, hookimpl
from flexserv_docs import page, schema


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[Any]:
    return [*schema.ROUTES, *page.routes()]
