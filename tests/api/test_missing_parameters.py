"""A required field that is absent, at any depth, is a 400 ``missing_required_parameter``
naming its path (docs/api.md), not ``invalid_value``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from flexserv_core import InvalidRequest, convert_param
from flexserv_core.testing.fakes import FakeBackendPlugin

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "tool-parsers", "constraints", "embeddings"]


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("/v1/chat/completions", {}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, "messages[0].role"),
        ("/v1/chat/completions", {"messages": USER, "response_format": {}}, "response_format.type"),
        ("/v1/chat/completions", {"messages": USER, "tools": [{"type": "function"}]}, "tools[0].function"),
        (
            "/v1/chat/completions",
            {"messages": USER, "tools": [{"type": "function", "function": {"parameters": {}}}]},
            "tools[0].function.name",
        ),
        ("/v1/completions", {"max_tokens": 1}, "prompt"),
        ("/v1/embeddings", {"model": "x"}, "input"),
    ],
)
async def test_a_missing_required_field_is_named(
    flexserv_client: Any, route: str, body: dict[str, Any], param: str
) -> None:
    r = await flexserv_client.post(route, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("missing_required_parameter", param), error
    assert error["message"] == f"Missing required parameter: '{param}'."


async def test_a_wrong_value_stays_invalid_value(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 0})
    error = r.json()["error"]
    assert (r.status_code, error["code"], error["param"]) == (400, "invalid_value", "max_tokens")


class _Named(msgspec.Struct):
    name: str


def test_convert_param_names_a_missing_field_under_its_parameter() -> None:
    with pytest.raises(InvalidRequest) as caught:
        convert_param({}, _Named, "tools[0]")
    error = caught.value
    assert (error.code, error.param, error.message) == (
        "missing_required_parameter",
        "tools[0].name",
        "Missing required parameter: 'tools[0].name'.",
    )
