"""The scope of every route, as a table: a key holding exactly that scope gets past
the key check, a key holding any other scope gets 403, and the table must list
every route the app (with the installed plugins) serves, so a new route needs a
decision here. Inference routes never need ``operations``, the scope that can
unload models."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from litestar import Litestar

from flexserv_core.edge.auth import Scope
from flexserv_core.testing.app import app_client, make_app
from tests.core.test_api_key_routes import PLUGINS

INFERENCE, OPERATIONS, METRICS, PUBLIC = Scope.INFERENCE, Scope.OPERATIONS, Scope.METRICS, None

SCOPES: dict[tuple[str, str], Scope | None] = {
    # OpenAI's API and vLLM's tokenizer routes (the tokenize plugin)
    ("GET", "/v1/models"): INFERENCE,
    ("GET", "/v1/models/{model_id:path}"): INFERENCE,
    ("POST", "/v1/chat/completions"): INFERENCE,
    ("POST", "/v1/completions"): INFERENCE,
    ("POST", "/v1/responses"): INFERENCE,
    ("GET", "/v1/responses/{response_id:str}"): INFERENCE,
    ("DELETE", "/v1/responses/{response_id:str}"): INFERENCE,
    ("GET", "/v1/responses/{response_id:str}/input_items"): INFERENCE,
    ("POST", "/v1/responses/{action:str}"): INFERENCE,
    ("POST", "/v1/embeddings"): INFERENCE,
    ("POST", "/v1/audio/transcriptions"): INFERENCE,
    ("POST", "/v1/audio/translations"): INFERENCE,
    ("POST", "/tokenize"): INFERENCE,
    ("POST", "/detokenize"): INFERENCE,
    # the classification plugin's inference routes
    ("POST", "/v1/rerank"): INFERENCE,
    ("POST", "/v1/score"): INFERENCE,
    ("POST", "/v1/classify"): INFERENCE,
    ("POST", "/v1/token-classify"): INFERENCE,
    ("POST", "/v1/ner"): INFERENCE,
    # documents: OCR, extraction, files
    ("POST", "/v1/ocr"): INFERENCE,
    ("POST", "/v1/vision/ocr"): INFERENCE,
    ("POST", "/v1/documents/extract"): INFERENCE,
    ("GET", "/v1/files"): INFERENCE,
    ("POST", "/v1/files"): INFERENCE,
    ("GET", "/v1/files/{file_id:str}"): INFERENCE,
    ("DELETE", "/v1/files/{file_id:str}"): INFERENCE,
    ("GET", "/v1/files/{file_id:str}/content"): INFERENCE,
    # anomaly detection
    ("POST", "/v1/anomaly/fit"): INFERENCE,
    ("POST", "/v1/anomaly/score"): INFERENCE,
    ("POST", "/v1/anomaly/detect"): INFERENCE,
    ("POST", "/v1/anomaly/load"): INFERENCE,
    ("GET", "/v1/anomaly/models"): INFERENCE,
    ("GET", "/v1/anomaly/models/{name:str}"): INFERENCE,
    ("DELETE", "/v1/anomaly/models/{name:str}"): INFERENCE,
    ("GET", "/v1/anomaly/backends"): INFERENCE,
    ("POST", "/v1/anomaly/stream"): INFERENCE,
    ("GET", "/v1/anomaly/stream/detectors"): INFERENCE,
    ("GET", "/v1/anomaly/stream/{model_id:str}"): INFERENCE,
    ("DELETE", "/v1/anomaly/stream/{model_id:str}"): INFERENCE,
    ("POST", "/v1/anomaly/stream/{model_id:str}/reset"): INFERENCE,
    # operating the server
    ("GET", "/v1/flexserv/info"): OPERATIONS,
    ("GET", "/v1/flexserv/models/loaded"): OPERATIONS,
    ("POST", "/v1/flexserv/models/unload"): OPERATIONS,
    ("GET", "/v1/flexserv/resources"): OPERATIONS,
    ("GET", "/metrics"): METRICS,
    # open to everyone
    ("GET", "/health"): PUBLIC,
    ("GET", "/v1/health"): PUBLIC,
    ("GET", "/v1/flexserv/health"): PUBLIC,
    ("GET", "/"): PUBLIC,
    ("GET", "/playground"): PUBLIC,
    ("GET", "/playground/static/{file_path:path}"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/openapi.yaml"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/init.js"): PUBLIC,
    ("GET", "/docs/assets/{file_path:path}"): PUBLIC,
    ("GET", "/schema"): PUBLIC,
    ("GET", "/schema/openapi.json"): PUBLIC,
    ("GET", "/schema/{path:str}"): PUBLIC,
}


def _served_routes(app: Litestar) -> set[tuple[str, str]]:
    return {
        (method, route.path)
        for route in app.routes
        for handler in getattr(route, "route_handlers", [])
        for method in getattr(handler, "http_methods", ())
        if method not in ("HEAD", "OPTIONS")
    }


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Litestar:
    keys = Path(tmp_path_factory.mktemp("keys")) / "keys"
    keys.write_text("".join(f"sk-{scope} {scope}\n" for scope in Scope))
    # every first-party plugin that adds routes
    plugins = [*PLUGINS, "responses", "docs", "tool-parsers", "image-input", "files", "ocr", "anomaly", "tokenize"]
    return make_app(plugins, settings={"api_keys_file": str(keys)})


def test_the_table_lists_every_route(app: Litestar) -> None:
    assert _served_routes(app) == set(SCOPES)


async def test_each_route_takes_exactly_its_scope(app: Litestar) -> None:
    wrong: list[str] = []
    async with app_client(app) as client:
        for (method, template), scope in sorted(SCOPES.items(), key=str):
            path = re.sub(r"\{[^}]+\}", "x", template)
            for held in Scope:
                response = await client.request(method, path, headers={"Authorization": f"Bearer sk-{held}"})
                refused = response.status_code == 403
                if refused != (scope is not None and held != scope):
                    wrong.append(f"{method} {template} with a {held} key: {response.status_code}")
                if refused:
                    assert response.json()["error"]["code"] == "forbidden"
            if scope is not None:
                response = await client.request(method, path)
                assert response.status_code == 401, f"{method} {template} without a key"
    assert not wrong, "\n".join(wrong)
