"""The API docs page at ``/docs``: Swagger UI, served from this server (no CDN).

The assets come from the ``swagger-ui-bundle-v2`` package (Swagger UI's own
distribution files as package data), so the page works offline. The page, its
assets and the schema it renders (``/openapi.json``) are public, like the schema
always was: they describe the API, and hold no model or server data. "Try it out"
asks for a key through the Authorize button when the server has keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from litestar import MediaType, Response, get
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

DOCS_PATH: Final = "/docs"
ASSETS_PATH: Final = "/docs/assets"
_PUBLIC: Final = {"public": True}

_PAGE: Final = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>FlexServ API</title>
  <link rel="stylesheet" href="{assets}/swagger-ui.css">
  <link rel="icon" type="image/png" href="{assets}/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{assets}/swagger-ui-bundle.js"></script>
  <script src="{docs}/init.js"></script>
</body>
</html>
"""

# validatorUrl: null, or Swagger UI would fetch a badge from an online validator.
_INIT: Final = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
"""


def page_html() -> str:
    return _PAGE.format(assets=ASSETS_PATH, docs=DOCS_PATH)


@get(DOCS_PATH, media_type=MediaType.HTML, include_in_schema=False, opt=_PUBLIC)
async def docs_page() -> str:
    return page_html()


@get(f"{DOCS_PATH}/init.js", include_in_schema=False, opt=_PUBLIC)
async def docs_init() -> Response[str]:
    return Response(content=_INIT, media_type="text/javascript")


def routes() -> list[Any]:
    assets = create_static_files_router(
        path=ASSETS_PATH,
        directories=[Path(swagger_ui_path)],
        name="docs-assets",
        include_in_schema=False,
        opt=dict(_PUBLIC),
    )
    return [docs_page, docs_init, assets]
