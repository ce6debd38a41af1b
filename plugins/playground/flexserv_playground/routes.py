"""Routes of the playground: the page, its static assets, and ``/`` -> the page.

All three are public (``opt={"public": True}``, read by the core's API-key
guard): the page carries no data, and its own API calls send the key the user
typed in, kept in the browser's sessionStorage.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from litestar import MediaType, Response, get
from litestar.datastructures import CacheControlHeader
from litestar.response import Redirect
from litestar.static_files import create_static_files_router

STATIC_DIR = Path(__file__).parent / "static"
PAGE_PATH = "/playground"
ASSETS_PATH = "/playground/static"

#: Everything the page loads comes from this server: no CDN, no inline script.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "img-src 'self' data: blob:",
        "media-src 'self' blob:",
        "style-src 'self'",
        "script-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)

PUBLIC: dict[str, Any] = {"public": True}


@get("/", opt=PUBLIC, include_in_schema=False)
async def root_redirect() -> Redirect:
    return Redirect(PAGE_PATH, status_code=307)


@functools.cache
def _page_bytes() -> bytes:
    return (STATIC_DIR / "index.html").read_bytes()


@get(PAGE_PATH, opt=PUBLIC, include_in_schema=False, cache_control=CacheControlHeader(no_cache=True))
async def page() -> Response[bytes]:
    return Response(
        _page_bytes(),
        media_type=MediaType.HTML,
        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff"},
    )


def playground_routes() -> list[Any]:
    """Fresh handlers for one app (a static router must not be shared between apps)."""
    assets = create_static_files_router(
        path=ASSETS_PATH,
        directories=[STATIC_DIR],
        opt=PUBLIC,
        cache_control=CacheControlHeader(no_cache=True),
        name="playground-static",
    )
    return [root_redirect, page, assets]
