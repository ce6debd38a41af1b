"""The ``docs`` plugin over ASGI: the schema documents every route (the core's and
other plugins'), the page and the schema stay open under keys, and ``-p no:docs``
removes exactly these routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from litestar import get
from openapi_spec_validator import validate

from flexserv_core import hookimpl
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
DOCS_ROUTES = ("/openapi.json", "/openapi.yaml", "/docs", "/docs/init.js", "/docs/assets/swagger-ui-bundle.js")


class PluginRoutes:
    """Another plugin's routes: the schema documents them too, with their default scope."""

    @hookimpl
    def flexserv_register_routes(self, settings: Any) -> list[Any]:
        @get("/metrics/myplugin", sync_to_thread=False)
        def metrics() -> str:
            return "flexserv:requests_running 0\n"

        return [metrics]


def _app(*, block: tuple[str, ...] = (), **settings: Any) -> Any:
    return make_app(
        [FakeBackendPlugin(), PluginRoutes(), "audio", "docs", "embeddings", "tokenize"], settings=settings, block=block
    )


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys"
    path.write_text("sk-inference inference\n")
    return path


async def test_docs_and_schema_stay_open_under_keys(keys_file: Path) -> None:
    async with app_client(_app(api_keys_file=str(keys_file))) as client:
        for path in DOCS_ROUTES:
            assert (await client.get(path)).status_code == 200, path
        assert (await client.get("/v1/models")).status_code == 401
        yaml_text = (await client.get("/openapi.yaml")).text
    assert "\nopenapi: 3.1.0\n" in yaml_text and "\n  /v1/chat/completions:\n" in yaml_text


async def test_blocked_the_routes_are_gone_and_the_rest_works() -> None:
    async with app_client(_app(block=("docs",))) as client:
        for path in (*DOCS_ROUTES, "/schema", "/schema/openapi.json", "/schema/swagger"):
            response = await client.get(path)
            assert response.status_code == 404, path
            assert response.json()["error"]["message"] == f"Unknown route: GET {path}"
        chat = await client.post("/v1/chat/completions", json=CHAT)
        assert chat.status_code == 200, chat.text
        info = (await client.get("/v1/flexserv/info")).json()
    docs = [p for p in info["plugins"] if p["name"] == "docs"]
    assert [p["status"] for p in docs] == ["blocked"]


async def test_litestars_own_schema_site_is_not_served() -> None:
    async with app_client(_app()) as client:
        for path in ("/schema", "/schema/openapi.json", "/schema/swagger", "/schema/redoc"):
            assert (await client.get(path)).status_code == 404, path


async def test_the_schema_validates_and_documents_every_body() -> None:
    async with app_client(_app()) as client:
        schema = (await client.get("/openapi.json")).json()
    validate(schema)
    paths = schema["paths"]
    for path, operations in paths.items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert responses["4XX"] == {"$ref": "#/components/responses/Error"}, (path, method)
            assert "content" in responses["200"], (path, method)
    chat_ok = paths["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert chat_ok["application/json"]["schema"]["$ref"].endswith("/ChatCompletion")
    assert chat_ok["text/event-stream"]["schema"]["$ref"].endswith("/ChatCompletionChunk")
    completion_ok = paths["/v1/completions"]["post"]["responses"]["200"]["content"]
    assert completion_ok["application/json"]["schema"]["$ref"].endswith("/Completion")
    audio = paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]["multipart/form-data"]
    form = schema["components"]["schemas"]["TranscriptionForm"]
    assert audio["schema"]["$ref"].endswith("/TranscriptionForm")
    assert form["properties"]["file"] == {"type": "string", "format": "binary"} and "file" in form["required"]
    unload = paths["/v1/flexserv/models/unload"]["post"]["requestBody"]
    assert unload["required"] is False
    assert unload["content"]["application/json"]["schema"]["$ref"].endswith("/UnloadRequest")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        assert "requestBody" in paths[path]["post"]
    error = schema["components"]["schemas"]["ErrorResponse"]
    assert error["properties"]["error"]["$ref"].endswith("/ErrorDetail")
    assert set(schema["components"]["schemas"]["ErrorDetail"]["properties"]) == {"message", "type", "param", "code"}
    assert paths["/v1/flexserv/info"]["get"]["x-flexserv-scope"] == "operations"
    assert paths["/metrics"]["get"]["x-flexserv-scope"] == "metrics"
    assert paths["/metrics/myplugin"]["get"]["x-flexserv-scope"] == "metrics"
    assert paths["/health"]["get"]["security"] == []
    assert "/openapi.json" not in paths and "/docs" not in paths


async def test_small_routes_and_request_bodies_are_documented() -> None:
    async with app_client(_app()) as client:
        schema = (await client.get("/openapi.json")).json()
    paths = schema["paths"]
    assert "/v1/health" in paths and "/tokenize" in paths and "/detokenize" in paths
    assert paths["/v1/health"]["get"]["security"] == []
    for path, name in (("/v1/chat/completions", "ChatCompletionRequest"), ("/v1/completions", "CompletionRequest")):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{name}"}
    chat = schema["components"]["schemas"]["ChatCompletionRequest"]
    assert "messages" in chat["required"]
    assert {"type": "integer", "minimum": 1, "maximum": 16} in chat["properties"]["n"]["anyOf"]
    [info] = [s for name, s in schema["components"]["schemas"].items() if name.endswith("ServerInfo")]
    assert info["properties"]["features"]["type"] == "array"
    assert "features" in info["required"]


async def test_the_audio_routes_are_documented() -> None:
    async with app_client(_app()) as client:
        schema = (await client.get("/openapi.json")).json()
    components = schema["components"]["schemas"]
    transcriptions = schema["paths"]["/v1/audio/transcriptions"]["post"]
    form = transcriptions["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert form == {"$ref": "#/components/schemas/TranscriptionForm"}
    assert {"stream", "timestamp_granularities"} <= set(components["TranscriptionForm"]["properties"])
    assert "text/event-stream" in transcriptions["responses"]["200"]["content"]
    assert "TranscriptionStreamEvent" in components and "words" in components["TranscriptionVerboseJson"]["properties"]
    translations = schema["paths"]["/v1/audio/translations"]["post"]
    assert "language" not in components["TranslationForm"]["properties"]
    assert "text/event-stream" not in translations["responses"]["200"]["content"]
