"""The edge over ASGI: request ids, API keys and scopes on every route group, CORS, the schema and docs page."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import get
from openapi_spec_validator import validate

from flexserv_core import hookimpl
from flexserv_core.edge.logs import TEXT_FORMAT, JsonFormatter, RequestIdFilter
from flexserv_core.testing import FakeBackendPlugin, app_client, make_app, openai_client

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


class PluginRoutes:
    """A plugin's routes that declare no scope: /metrics-like and an operations-like one."""

    @hookimpl
    def flexserv_register_routes(self, settings: Any) -> list[Any]:
        @get("/metrics/myplugin", sync_to_thread=False)
        def metrics() -> str:
            return "flexserv:requests_running 0\n"

        @get("/v1/myplugin/status", sync_to_thread=False)
        def status() -> dict[str, str]:
            return {"status": "fine"}

        return [metrics, status]


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys"
    path.write_text(
        "# key scopes\nsk-infer inference\nsk-ops operations\nsk-metrics metrics\nsk-both inference,metrics\n\nsk-all\n"
    )
    return path


def _app(keys_file: Path | None = None, **settings: Any) -> Any:
    if keys_file is not None:
        settings["api_keys_file"] = str(keys_file)
    return make_app([FakeBackendPlugin(), PluginRoutes()], settings=settings)


GROUPS = {
    "inference": ("POST", "/v1/chat/completions", CHAT),
    "inference-models": ("GET", "/v1/models", None),
    "operations": ("GET", "/v1/flexserv/info", None),
    "operations-plugin-default": ("GET", "/v1/myplugin/status", None),
    "metrics": ("GET", "/metrics", None),
    "metrics-plugin-default": ("GET", "/metrics/myplugin", None),
}
SCOPE_OF = {
    "inference": "inference",
    "inference-models": "inference",
    "operations": "operations",
    "operations-plugin-default": "operations",
    "metrics": "metrics",
    "metrics-plugin-default": "metrics",
}
KEY_SCOPES = {
    "sk-infer": {"inference"},
    "sk-ops": {"operations"},
    "sk-metrics": {"metrics"},
    "sk-both": {"inference", "metrics"},
    "sk-all": {"inference", "operations", "metrics"},
    "sk-cli": {"inference", "operations", "metrics"},
}


async def _call(client: httpx.AsyncClient, group: str, headers: dict[str, str]) -> httpx.Response:
    method, path, body = GROUPS[group]
    return await client.request(method, path, json=body, headers=headers)


async def test_every_key_reaches_exactly_its_scopes(keys_file: Path) -> None:
    async with app_client(_app(keys_file, api_key=["sk-cli"])) as client:
        for key, scopes in KEY_SCOPES.items():
            for group in GROUPS:
                response = await _call(client, group, {"Authorization": f"Bearer {key}"})
                expected = 200 if SCOPE_OF[group] in scopes else 403
                assert response.status_code == expected, (key, group, response.text)
                if expected == 403:
                    error = response.json()["error"]
                    assert error["type"] == "permission_error"
                    assert SCOPE_OF[group] in error["message"]


async def test_a_metrics_only_key_cannot_chat_through_the_sdk(keys_file: Path) -> None:
    import openai

    async with app_client(_app(keys_file)) as client:
        sdk = openai_client(client, api_key="sk-metrics")
        with pytest.raises(openai.PermissionDeniedError):
            await sdk.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
        sdk = openai_client(client, api_key="sk-infer")
        reply = await sdk.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": "Bearer sk-infe"}, {"Authorization": "sk-infer"}],
)
async def test_a_wrong_or_missing_key_is_401_on_every_group(keys_file: Path, headers: dict[str, str]) -> None:
    async with app_client(_app(keys_file)) as client:
        for group in GROUPS:
            response = await _call(client, group, headers)
            assert response.status_code == 401, group
            assert response.json()["error"]["code"] == "invalid_api_key"
            assert response.headers["www-authenticate"] == "Bearer"


async def test_health_docs_and_schema_stay_open_under_keys(keys_file: Path) -> None:
    async with app_client(_app(keys_file)) as client:
        for path in ("/health", "/v1/flexserv/health", "/openapi.json", "/openapi.yaml", "/docs", "/schema"):
            assert (await client.get(path)).status_code == 200, path
        assert (await client.get("/docs/assets/swagger-ui-bundle.js")).status_code == 200
        assert (await client.get("/schema/openapi.json")).json() == (await client.get("/openapi.json")).json()


async def test_keys_from_the_environment_and_a_bad_keys_file(tmp_path: Path) -> None:
    from flexserv_core.errors import UsageError
    from flexserv_core.settings import CoreSettings, resolve_settings

    settings = resolve_settings([CoreSettings], cli={}, env={"FLEXSERV_API_KEY": "k1,k2"})
    assert settings.core.api_key == ["k1", "k2"]
    bad = tmp_path / "keys"
    bad.write_text("sk-1 inference\nsk-2 admin\n")
    with pytest.raises(UsageError, match="line 2"):
        _app(bad)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("sk-tab\tinference", "a tab"),
        ("sk-spaces inference metrics", "separated by spaces"),
        ("sk-\u00e9 inference", "visible ASCII"),
        ("sk-1 inference", "line 1 again"),
    ],
)
def test_a_malformed_keys_file_line_stops_start_up_naming_the_line(tmp_path: Path, line: str, why: str) -> None:
    from flexserv_core.errors import UsageError

    path = tmp_path / "keys"
    path.write_text(f"sk-1 inference\n# comment\n{line}\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"line 3: .*{why}") as raised:
        _app(path)
    assert "sk-" not in str(raised.value).split("line 3")[1]  # the key is never printed


async def test_a_tab_separated_line_never_grants_every_scope(tmp_path: Path) -> None:
    from flexserv_core.edge.auth import Scope, read_keys_file

    path = tmp_path / "keys"
    path.write_text("sk-a   inference , metrics  \nsk-b *\n")
    keys = {k.secret: k.scopes for k in read_keys_file(path)}
    assert keys == {b"sk-a": {Scope.INFERENCE, Scope.METRICS}, b"sk-b": set(Scope)}
    path.write_text("sk-t\tmetrics\n")
    with pytest.raises(Exception, match="line 1"):
        read_keys_file(path)


async def test_request_id_round_trips_on_success_errors_and_unknown_routes() -> None:
    async with app_client(_app(None, api_key=["sk"])) as client:
        for method, path, headers in [
            ("GET", "/health", {}),
            ("GET", "/v1/flexserv/info", {}),  # 401
            ("GET", "/no/such/route", {}),  # 404
            ("POST", "/v1/chat/completions", {"Authorization": "Bearer sk"}),  # 400: no body
        ]:
            response = await client.request(method, path, headers={**headers, "X-Request-Id": "req-42.a:b"})
            assert response.headers["x-request-id"] == "req-42.a:b", path
        generated = await client.get("/health")
        assert len(generated.headers["x-request-id"]) == 32
        for unsafe in ("has space", "x" * 129, "new\nline", "ünï"):
            response = await client.get("/health", headers={"X-Request-Id": unsafe.encode("utf-8")})
            assert response.headers["x-request-id"] != unsafe
            assert len(response.headers["x-request-id"]) == 32


@pytest.mark.parametrize("json_format", [False, True])
async def test_request_id_in_every_log_line_of_the_request(json_format: bool) -> None:
    import json

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        async with app_client(_app()) as client:
            reply = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "trace-123"})
            streamed = await client.post(
                "/v1/chat/completions", json={**CHAT, "stream": True}, headers={"X-Request-Id": "trace-456"}
            )
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    completion_id = reply.json()["id"]
    stream_id = json.loads(streamed.text.split("data: ", 2)[1].split("\n")[0])["id"]
    lines = stream.getvalue().splitlines()
    if json_format:
        entries = [json.loads(line) for line in lines]
        mine = [e for e in entries if completion_id in e["message"]]
        assert mine and all(e["request_id"] == "trace-123" for e in mine)
        assert any(e["request_id"] == "trace-456" and stream_id in e["message"] for e in entries)
    else:
        assert any(completion_id in line and "[trace-123]" in line for line in lines)
        assert any(stream_id in line and "[trace-456]" in line for line in lines)
    assert completion_id != stream_id and "trace" not in completion_id


async def test_cors_preflight_and_exposed_request_id() -> None:
    app = _app(None, api_key=["sk"], cors_allow_origins=["https://ui.example"], cors_allow_credentials=True)
    async with app_client(app) as client:
        preflight = await client.options(
            "/v1/chat/completions",
            headers={
                "Origin": "https://ui.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code in (200, 204)
        assert preflight.headers["access-control-allow-origin"] == "https://ui.example"
        assert preflight.headers["access-control-allow-credentials"] == "true"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        models = await client.get("/v1/models", headers={"Origin": "https://ui.example", "Authorization": "Bearer sk"})
        assert models.headers["access-control-allow-origin"] == "https://ui.example"
        assert "x-request-id" in models.headers["access-control-expose-headers"].lower()
        other = await client.options(
            "/v1/models", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
        )
        assert other.headers.get("access-control-allow-origin") != "https://evil.example"


async def test_no_cors_headers_unless_configured() -> None:
    async with app_client(_app()) as client:
        response = await client.get("/v1/models", headers={"Origin": "https://ui.example"})
        assert "access-control-allow-origin" not in response.headers


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


def test_configured_logging_follows_a_replaced_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process CLI run configures logging while ``sys.stderr`` is one stream; a later
    record must go to the stream current then, not to the first (which may be closed)."""
    import sys

    from flexserv_core.edge.logs import configure_logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stderr", first)
        configure_logging("info")
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("flexserv.test").info("after the swap")
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
    assert "after the swap" in second.getvalue()


def test_the_key_guard_runs_on_the_event_loop(keys_file: Path) -> None:
    """Litestar runs a plain-function guard in its thread pool (a thread hop on every
    request); the key guard is a coroutine, and without keys there is no guard at all."""
    import inspect

    guarded = _app(keys_file)
    assert guarded.guards and all(inspect.iscoroutinefunction(g) for g in guarded.guards)
    assert list(_app().guards) == []
