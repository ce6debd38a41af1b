"""``features`` in /v1/flexserv/info: what the playground shows controls for."""

from __future__ import annotations

from flexserv_core.testing import FakeBackendPlugin, app_client, make_app


async def test_a_text_backend_advertises_structured_outputs_and_tools() -> None:
    async with app_client(make_app([FakeBackendPlugin(), "tool-parsers", "constraints"])) as client:
        info = (await client.get("/v1/flexserv/info")).json()
    assert info["features"] == ["response_format", "json_schema", "tools"]
    assert any(b["kind"] == "text" for b in info["backends"])


async def test_structured_outputs_are_advertised_only_with_a_constraint_compiler() -> None:
    # without one such a request is a 400 (constraints_unavailable): no control for it
    async with app_client(make_app([FakeBackendPlugin(), "tool-parsers"], block=["constraints"])) as client:
        info = (await client.get("/v1/flexserv/info")).json()
    assert info["features"] == ["tools"]


async def test_no_text_backend_advertises_nothing() -> None:
    async with app_client(make_app([])) as client:
        info = (await client.get("/v1/flexserv/info")).json()
    assert not any(b["kind"] == "text" for b in info["backends"])
    assert info["features"] == []
