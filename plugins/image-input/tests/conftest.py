"""The image-input plugin's tests: the app serves the fake text backend
(``fake-model``, text only) and this plugin, loaded by its entry point."""

from __future__ import annotations

import pytest

from flexserv_core.testing import FakeBackendPlugin


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin()


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "image-input", "responses"]
