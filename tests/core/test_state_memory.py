"""``memory://`` keeps every promise of the state layer's contract."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from flexserv_core import StateBackend
from flexserv_core.state.memory import MemoryBackend
from flexserv_core.testing import StateBackendContract


class TestMemoryBackend(StateBackendContract):
    @pytest.fixture
    async def state_backend(self) -> AsyncIterator[StateBackend]:
        yield MemoryBackend()
