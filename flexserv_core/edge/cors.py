"""CORS from the ``--cors-*`` settings (none unless origins are configured)."""

from __future__ import annotations

from litestar.config.cors import CORSConfig

from flexserv_core.edge import ignored_fields
from flexserv_core.edge.request_id import HEADER
from flexserv_core.settings import CoreSettings


def cors_config(core: CoreSettings) -> CORSConfig | None:
    if not core.cors_allow_origins:
        return None
    return CORSConfig(
        allow_origins=list(core.cors_allow_origins),
        allow_methods=list(core.cors_allow_methods),  # type: ignore[arg-type]
        allow_headers=list(core.cors_allow_headers),
        allow_credentials=core.cors_allow_credentials,
        # Browsers hide response headers from scripts unless exposed.
        expose_headers=[HEADER, ignored_fields.HEADER],
    )
