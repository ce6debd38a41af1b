"""The example plugin, loaded through its real entry point (it must be installed)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import pytest

from flexserv_core.testing import FakeBackendPlugin


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    # "request-policy" is an entry-point name: the plugin manager loads it as an
    # installed distribution, the way `flexserv run` does.
    return ["request-policy", FakeBackendPlugin()]


@pytest.fixture
def flexserv_settings() -> dict[str, Any]:
    return {"request_policy_max_tokens_cap": 5, "request_policy_default_temperature": 0.0}


def test_entry_point_is_installed() -> None:
    names = {ep.name: ep.value for ep in entry_points(group="flexserv")}
    assert names.get("request-policy") == "flexserv_request_policy.plugin"


async def test_plugin_is_listed_with_its_distribution(flexserv_server, flexserv_client) -> None:
    info = flexserv_server.pm.infos["request-policy"]
    assert info.distribution == "flexserv-request-policy"
    assert "flexserv_preprocess_request" in info.hooks
    routes = (await flexserv_client.get("/v1/flexserv/info")).json()["plugins"]
    listed = next(p for p in routes if p["name"] == "request-policy")
    assert listed["routes"] == ["GET /v1/contrib/request-policy"]


async def test_caps_max_tokens_before_validation(flexserv_openai, flexserv_client) -> None:
    completion = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=50
    )
    assert completion.usage.completion_tokens == 5
    assert completion.choices[0].finish_reason == "length"
    status = (await flexserv_client.get("/v1/contrib/request-policy")).json()
    assert status["requests_capped"] == 1
    assert status["requests_defaulted"] == 1
    assert status["policy"]["request_policy_max_tokens_cap"] == 5


async def test_leaves_small_requests_alone(flexserv_openai, flexserv_client) -> None:
    completion = await flexserv_openai.completions.create(
        model="fake-model", prompt="hi", max_tokens=3, temperature=1.0
    )
    assert completion.usage.completion_tokens == 3
    status = (await flexserv_client.get("/v1/contrib/request-policy")).json()
    assert status["requests_capped"] == 0
    assert status["requests_defaulted"] == 0
