"""Bad input at the HTTP layer always answers OpenAI-shaped 4xx JSON."""

from __future__ import annotations

import logging

import pytest


def assert_openai_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if code:
        assert error["code"] == code
    return error


async def test_unknown_route(flexserv_client) -> None:
    error = assert_openai_error(await flexserv_client.get("/v1/nothing-here"), 404, "not_found")
    assert "/v1/nothing-here" in error["message"]


async def test_wrong_method(flexserv_client) -> None:
    assert_openai_error(await flexserv_client.get("/v1/flexserv/models/unload"), 405, "method_not_allowed")
    assert_openai_error(await flexserv_client.delete("/v1/models"), 405, "method_not_allowed")


async def test_malformed_json(flexserv_client) -> None:
    r = await flexserv_client.post(
        "/v1/flexserv/models/unload", content=b'{"model_id": ', headers={"content-type": "application/json"}
    )
    assert_openai_error(r, 400, "invalid_json")


async def test_wrong_content_type(flexserv_client) -> None:
    r = await flexserv_client.post(
        "/v1/flexserv/models/unload",
        content=b"model_id=x",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert_openai_error(r, 415, "unsupported_media_type")


@pytest.mark.parametrize("body", [b"[1, 2]", b'"*"', b"42"])
async def test_json_that_is_not_an_object(flexserv_client, body: bytes) -> None:
    r = await flexserv_client.post(
        "/v1/flexserv/models/unload", content=body, headers={"content-type": "application/json"}
    )
    assert_openai_error(r, 400)


async def test_wrong_type_names_param(flexserv_client) -> None:
    r = await flexserv_client.post("/v1/flexserv/models/unload", json={"model_id": 3})
    assert assert_openai_error(r, 400)["param"] == "model_id"


async def test_path_traversal_model_id_reaches_the_models_route_and_is_not_found(flexserv_client) -> None:
    # percent-encoded, so the client does not collapse the dots: the route gets the id itself
    r = await flexserv_client.get("/v1/models/..%2F..%2Fetc%2Fpasswd")
    assert r.request.url.raw_path == b"/v1/models/..%2F..%2Fetc%2Fpasswd"
    error = assert_openai_error(r, 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "'../../etc/passwd'" in error["message"]


async def test_dot_segments_are_resolved_before_routing(flexserv_client) -> None:
    # an unencoded ../ never reaches /v1/models: the URL is /etc/passwd, an unknown route
    r = await flexserv_client.get("/v1/models/../../etc/passwd")
    assert r.request.url.raw_path == b"/etc/passwd"
    error = assert_openai_error(r, 404)
    assert error["code"] == "not_found" and "GET /etc/passwd" in error["message"]


async def test_a_client_error_is_logged_with_its_code_and_reason(flexserv_client, caplog) -> None:
    # the access log says only "400": the operator needs the why, as a 5xx gets it
    chat = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    with caplog.at_level(logging.INFO, logger="flexserv_core.api.errors"):
        assert_openai_error(await flexserv_client.post("/v1/chat/completions", json=chat), 404, "model_not_found")
        assert_openai_error(await flexserv_client.get("/v1/flexserv/models/unload"), 405, "method_not_allowed")
    lines = [r.getMessage() for r in caplog.records if r.name == "flexserv_core.api.errors"]
    assert lines == [
        "POST /v1/chat/completions -> 404 model_not_found: The model 'nope' does not exist or is not served here."
        " See GET /v1/models.",
        "GET /v1/flexserv/models/unload -> 405 method_not_allowed: Method GET is not allowed on /v1/flexserv/models/unload",
    ]
