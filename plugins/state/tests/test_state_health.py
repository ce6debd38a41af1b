"""``/v1/flexserv/health`` says whether the state store answered: after an operation
failed with ``StateUnavailable`` it names the error and since when, and once one
succeeds again it is ``ok``. Readiness itself is not withdrawn (other routes serve)."""

from __future__ import annotations

from typing import Any

from flexserv_state import MemoryBackend, Record, StateBackend, scheme_of

from flexserv_core import Settings, StateUnavailable, hookimpl
from flexserv_core.testing import app_client, make_app


class FlakyBackend(MemoryBackend):
    """``memory://`` that can be taken down."""

    down = False

    async def get(self, collection: str, record_id: str, owner: str | None, *, now: float) -> Record | None:
        if self.down:
            raise StateUnavailable(f"State store {self.url} is unavailable: connection refused")
        return await super().get(collection, record_id, owner, now=now)


class FlakyPlugin:
    def __init__(self) -> None:
        self.backend = FlakyBackend("flaky://")

    @hookimpl
    def flexserv_state_backend(self, url: str, settings: Settings) -> StateBackend | None:
        return self.backend if scheme_of(url) == "flaky" else None


async def state_health(client: Any) -> dict[str, Any]:
    answer = await client.get("/v1/flexserv/health")
    assert answer.status_code == 200, answer.text
    health: dict[str, Any] = answer.json()["state"]
    return health


async def test_health_says_when_the_store_stopped_answering_and_when_it_is_back() -> None:
    plugin = FlakyPlugin()
    app = make_app([plugin, "files"], settings={"state_url": "flaky://"})
    missing = "/v1/files/file-" + "0" * 32
    async with app_client(app) as client:
        assert await state_health(client) == {"url": "flaky://", "status": "ok"}
        plugin.backend.down = True
        assert (await client.get(missing)).status_code == 503
        health = await state_health(client)
        assert health["status"] == "unavailable" and "connection refused" in health["error"], health
        assert isinstance(health["since"], float)
        plugin.backend.down = False
        assert (await client.get(missing)).status_code == 404
        assert await state_health(client) == {"url": "flaky://", "status": "ok"}
