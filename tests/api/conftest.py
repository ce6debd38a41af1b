"""Fixtures the text-route modules share: the app serves the deterministic fake
text backend (``fake-model``) with the built-in tool parsers and constraint compiler, and a test can look at what it recorded through
``fake``. Modules that need other plugins override ``flexserv_plugins``."""

from __future__ import annotations

import pytest

from flexserv_core.testing.fakes import FakeBackendPlugin


@pytest.fixture
def fake() -> FakeBackendPlugin:
    """The fake backend plugin of this test's app (a fresh one per test)."""
    return FakeBackendPlugin()


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "tool-parsers", "constraints"]
