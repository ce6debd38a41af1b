"""The playground's routes on a real app (ASGI, no browser): the page, its assets,
the redirect, and that they stay public when an API key guards the API."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flexserv_playground import STATIC_DIR

from flexserv_core.testing import app_client, make_app


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return ["playground"]  # the installed entry point


async def test_root_redirects_to_the_page(flexserv_client: Any) -> None:
    r = await flexserv_client.get("/", follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"] == "/playground"


async def test_page_is_html_with_a_strict_content_security_policy(flexserv_client: Any) -> None:
    r = await flexserv_client.get("/playground")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "<title>FlexServ playground</title>" in r.text
    csp = r.headers["content-security-policy"]
    # Everything from this server: the page works offline and loads no third-party code.
    assert "default-src 'self'" in csp and "script-src 'self'" in csp and "connect-src 'self'" in csp


async def test_every_asset_the_page_references_is_served(flexserv_client: Any) -> None:
    page = (await flexserv_client.get("/playground")).text
    referenced = set(re.findall(r'(?:href|src)="(/playground/static/[^"]+)"', page))
    assert {"/playground/static/app.js", "/playground/static/style.css"} <= referenced
    # ES-module imports between the scripts, e.g. import { api } from "./api.js".
    for script in STATIC_DIR.glob("*.js"):
        for name in re.findall(r'from "\./([\w-]+\.js)"', script.read_text()):
            referenced.add(f"/playground/static/{name}")
    assert len(referenced) >= 9
    for path in sorted(referenced):
        r = await flexserv_client.get(path)
        assert r.status_code == 200, path
        expected = {"js": "javascript", "css": "text/css", "svg": "image/svg+xml"}[path.rsplit(".", 1)[1]]
        assert expected in r.headers["content-type"], (path, r.headers["content-type"])


async def test_scripts_use_no_remote_resources() -> None:
    for asset in STATIC_DIR.iterdir():
        text = asset.read_text()
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text), f"{asset.name} references a remote URL"


async def test_unknown_asset_is_an_openai_shaped_404(flexserv_client: Any) -> None:
    r = await flexserv_client.get("/playground/static/nope.js")
    assert r.status_code == 404
    assert set(r.json()["error"]) >= {"message", "type", "code"}


async def test_page_and_assets_are_public_under_an_api_key() -> None:
    app = make_app(["playground"], settings={"api_key": "sekret"})
    async with app_client(app) as client:
        assert (await client.get("/playground")).status_code == 200
        assert (await client.get("/playground/static/app.js")).status_code == 200
        assert (await client.get("/", follow_redirects=False)).status_code == 307
        # ...while the API the page calls still wants the key.
        assert (await client.get("/v1/models")).status_code == 401
        ok = await client.get("/v1/models", headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200


async def test_without_the_plugin_there_is_no_page() -> None:
    async with app_client(make_app([])) as client:
        assert (await client.get("/playground")).status_code == 404
        assert (await client.get("/")).status_code == 404


async def test_two_apps_each_get_their_own_routes() -> None:
    """The static router is built per app: a second app in the same process works too."""
    for _ in range(2):
        async with app_client(make_app(["playground"])) as client:
            assert (await client.get("/playground/static/style.css")).status_code == 200
