"""With ``api_key`` set, every non-public route of every route group refuses a
missing or wrong key with an OpenAI-shaped 401, and accepts the right one.

The routes are enumerated from the app itself (core, OpenAI API, FlexServ
management and the installed plugins' groups), so a route added later is covered
without editing this file. The guard runs before the handler, so no model loads.
"""

from __future__ import annotations

import re

import pytest
from litestar import Litestar

from flexserv_core.testing.app import app_client, make_app
from flexserv_core.testing.fakes import FakeBackendPlugin

KEY = "sk-right-key"
PLUGINS: list[object | str] = [
    FakeBackendPlugin(),
    "playground",
    "classification",
    "sentence-transformers",
    "whisper",
    "resources",
    "audio",
    "embeddings",
    "oom-monitor",
]

WRONG_HEADERS = {
    "missing": {},
    "wrong key": {"Authorization": "Bearer sk-wrong-key"},
    "key with a suffix": {"Authorization": f"Bearer {KEY}x"},
    "key prefix": {"Authorization": f"Bearer {KEY[:-1]}"},
    "no scheme": {"Authorization": KEY},
    "other scheme": {"Authorization": f"Basic {KEY}"},
    "empty bearer": {"Authorization": "Bearer "},
    "key in another header": {"X-Api-Key": KEY},
}


def _routes(app: Litestar) -> list[tuple[str, str, bool]]:
    """``(method, concrete path, public)`` for every HTTP handler."""
    out = []
    for route in app.routes:
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        for handler in getattr(route, "route_handlers", []):
            for method in sorted(getattr(handler, "http_methods", ())):
                if method in ("HEAD", "OPTIONS"):
                    continue
                out.append((method, path, bool(handler.opt.get("public"))))
    return out


@pytest.fixture(scope="module")
def app() -> Litestar:
    return make_app(PLUGINS, settings={"api_key": KEY})


def test_route_groups_are_all_enumerated(app: Litestar) -> None:
    paths = {p for _, p, _ in _routes(app)}
    for expected in ("/v1/chat/completions", "/v1/embeddings", "/v1/audio/transcriptions", "/v1/models"):
        assert expected in paths
    assert any(p.startswith("/v1/flexserv/models") for p in paths)
    assert len(paths) >= 15, sorted(paths)


async def test_every_protected_route_refuses_wrong_keys(app: Litestar) -> None:
    routes = _routes(app)
    protected = [(m, p) for m, p, public in routes if not public]
    assert protected
    async with app_client(app) as client:
        for method, path in protected:
            for label, headers in WRONG_HEADERS.items():
                response = await client.request(method, path, headers=headers)
                assert response.status_code == 401, f"{method} {path} with {label}: {response.status_code}"
                error = response.json()["error"]
                assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
                assert set(error) == {"message", "type", "param", "code"}


async def test_the_right_key_passes_the_guard_and_public_routes_need_none(app: Litestar) -> None:
    routes = _routes(app)
    async with app_client(app) as client:
        for method, path, public in routes:
            if method != "GET":
                continue  # a POST with the right key would run the handler (and load models)
            response = await client.request(method, path, headers={"Authorization": f"Bearer {KEY}"})
            assert response.status_code != 401, f"{method} {path} refused the right key"
            if public:
                response = await client.request(method, path)
                assert response.status_code != 401, f"public {method} {path} asked for a key"
        # a POST handler reached with the right key: validation (400), not authentication
        response = await client.post("/v1/chat/completions", content=b"{", headers={"Authorization": f"Bearer {KEY}"})
        assert response.status_code == 400
