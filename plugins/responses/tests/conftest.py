"""The Responses plugin's tests: the app serves the fake text backend
(``fake-model``, the test module's ``fake``) and this plugin, loaded by its entry point."""

from __future__ import annotations

import pytest

from flexserv_core.testing import FakeBackendPlugin


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin()


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "responses", "tool-parsers", "constraints"]
