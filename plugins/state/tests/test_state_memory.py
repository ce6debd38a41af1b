"""``memory://`` keeps every promise of the state layer's contract."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from flexserv_state import MemoryBackend, StateBackend, StateBackendContract


class TestMemoryBackend(StateBackendContract):
    @pytest.fixture
    async def state_backend(self) -> AsyncIterator[StateBackend]:
        yield MemoryBackend()
