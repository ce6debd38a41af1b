"""The kit's apps take ``[[models]]`` tables (options included), through
``make_app(models=...)`` and the ``flexserv_models`` fixture."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core.errors import UsageError
from flexserv_core.testing import FakeBackendPlugin, make_app

TABLE = {"name": "tuned", "source": "fake-weights", "backend": "fake", "options": {"temperature_cap": 0.5}}


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return [FakeBackendPlugin()]


@pytest.fixture
def flexserv_models() -> list[dict[str, Any]]:
    return [TABLE]


async def test_a_models_table_reaches_the_backend_with_its_options(flexserv_client: Any, flexserv_server: Any) -> None:
    r = await flexserv_client.post(
        "/v1/chat/completions",
        json={"model": "tuned", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
    )
    assert r.status_code == 200, r.text
    loaded = flexserv_server.registry.model_if_loaded("tuned")
    assert loaded is not None and loaded.spec.options == {"temperature_cap": 0.5}
    assert loaded.spec.origin == "config"


def test_a_bad_table_is_refused_as_the_config_file_refuses_it() -> None:
    with pytest.raises(UsageError, match="unknown key"):
        make_app([FakeBackendPlugin()], models=[{**TABLE, "sorce": "x"}])
