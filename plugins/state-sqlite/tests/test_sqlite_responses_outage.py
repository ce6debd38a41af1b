"""The Responses store on a real SQLite file: an outage of the store gives 503s on
the routes that need it while the rest keeps serving, and a second app on the
same file (another process's view) finds what the first stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flexserv_state_sqlite import backend as sqlite_module

from flexserv_core.testing import FakeBackendPlugin, app_client, make_app


@pytest.fixture
def fake() -> FakeBackendPlugin:
    return FakeBackendPlugin(eos_after=10)


@pytest.fixture
def flexserv_plugins(fake: FakeBackendPlugin) -> list[object | str]:
    return [fake, "state-sqlite", "responses"]


@pytest.fixture
def state_db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def flexserv_settings(state_db: Path) -> dict[str, Any]:
    return {"state_url": f"sqlite://{state_db}"}


@pytest.fixture
def write_locked(state_db: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A writer waits a fifth of a second for another process's lock, then gives up."""
    monkeypatch.setattr(sqlite_module, "BUSY_TIMEOUT", 0.2)
    yield


async def test_a_locked_store_answers_503_and_chat_keeps_serving(
    write_locked: None, flexserv_client: Any, state_db: Path
) -> None:
    ok = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": "hi"})
    assert ok.status_code == 200
    stored = ok.json()["id"]
    blocker = sqlite3.connect(state_db, isolation_level=None, timeout=0.1)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        failed = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": "hi"})
        assert failed.status_code == 503
        error = failed.json()["error"]
        assert error["code"] == "state_unavailable" and error["type"] == "server_error"
        assert str(state_db) in error["message"]
        # readers go on in WAL mode, and so do the routes that need no store
        assert (await flexserv_client.get(f"/v1/responses/{stored}")).status_code == 200
        chat = await flexserv_client.post(
            "/v1/chat/completions", json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert chat.status_code == 200
        assert (await flexserv_client.get("/health")).status_code == 200
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (await flexserv_client.get(f"/v1/responses/{stored}")).json()["id"] == stored


async def test_two_servers_on_one_file_share_the_responses(state_db: Path, flexserv_client: Any) -> None:
    first = await flexserv_client.post("/v1/responses", json={"model": "fake-model", "input": "hi", "store": True})
    other = make_app(
        [FakeBackendPlugin(eos_after=10), "state-sqlite", "responses"], settings={"state_url": f"sqlite://{state_db}"}
    )
    async with app_client(other) as client:
        follow = await client.post(
            "/v1/responses",
            json={"model": "fake-model", "input": "more", "previous_response_id": first.json()["id"]},
        )
        assert follow.status_code == 200, follow.text
        assert (await client.get(f"/v1/responses/{first.json()['id']}")).json()["output"] == first.json()["output"]
