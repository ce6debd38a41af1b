"""The state plugin's wiring: ``--state-url`` picks a backend through the hook the
plugin declares, the server holds the store from start-up (``store_of``), requests
get their owner from the API key, URLs lose their password before they are shown."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_state import (
    CollectionLimits,
    MemoryBackend,
    StateStore,
    pending_migrations,
    plan_eviction,
    redact_url,
    store_of,
)
from litestar import Request, get

from flexserv_core import (
    FlexServer,
    QuotaExceeded,
    StateUnavailable,
    UsageError,
    hookimpl,
    request_owner,
    request_reads_any_owner,
)
from flexserv_core.testing import app_client, make_app


def key_identity(secret: bytes) -> str:
    """The owner of a key's records: stable across replicas and restarts (so pinned here)."""
    return "key-" + hashlib.sha256(b"flexserv-owner\0" + secret).hexdigest()[:32]


class OwnerPlugin:
    """A route that stores a note for its caller and lists the caller's notes."""

    @hookimpl
    def flexserv_register_routes(self, settings: Any) -> list[Any]:
        @get("/v1/notes", opt={"scope": "inference"})
        async def notes(request: Request[Any, Any, Any]) -> dict[str, Any]:
            server: FlexServer = request.app.state.flexserv
            notes = store_of(server).collection("notes")
            owner = request_owner(request)
            await notes.put({"by": owner}, owner=owner)
            page = await notes.list(owner=owner)
            return {"owner": owner, "count": len(page.records), "reads_any": request_reads_any_owner(request)}

        return [notes]


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("postgresql://app:s3cret@db.example:5433/flex?sslmode=require") == (
        "postgresql://app:***@db.example:5433/flex?sslmode=require"
    )
    assert redact_url("postgresql://app@db/flex") == "postgresql://app@db/flex"
    assert redact_url("sqlite:///var/lib/flexserv/state.db") == "sqlite:///var/lib/flexserv/state.db"
    assert "pw" not in redact_url("postgresql://u:pw@[::1]:5432/x")


def test_plan_eviction_takes_the_oldest_until_the_new_record_fits() -> None:
    limits = CollectionLimits(max_items=3, max_bytes=100)
    assert plan_eviction(limits, "c", 10, 2, 20, iter([])) == []
    assert plan_eviction(limits, "c", 10, 3, 30, iter([("a", 10), ("b", 10), ("c", 10)])) == ["a"]
    assert plan_eviction(limits, "c", 60, 3, 90, iter([("a", 40), ("b", 40), ("c", 10)])) == ["a", "b"]
    with pytest.raises(QuotaExceeded):
        plan_eviction(CollectionLimits(max_items=1, when_full="refuse"), "c", 1, 1, 1, iter([("a", 1)]))


def test_pending_migrations_are_the_newer_known_versions_and_a_newer_store_is_refused() -> None:
    assert pending_migrations("sqlite:///s.db", 0, {2: [], 1: []}) == [1, 2]
    assert pending_migrations("sqlite:///s.db", 1, {1: [], 2: []}) == [2]
    assert pending_migrations("sqlite:///s.db", 2, {1: [], 2: []}) == []
    with pytest.raises(
        StateUnavailable, match=r"sqlite:///s.db has schema version 3, newer than this FlexServ knows \(2\)"
    ):
        pending_migrations("sqlite:///s.db", 3, {1: [], 2: []})


async def test_the_server_holds_the_store_chosen_by_the_url() -> None:
    app = make_app(settings={"state_url": "memory://"})
    server: FlexServer = app.state.flexserv
    async with app_client(app):
        store = store_of(server)
        assert isinstance(store, StateStore)
        assert isinstance(store.backend, MemoryBackend)
        assert store.collection("x") is store.collection("x", CollectionLimits(max_items=1))
        with pytest.raises(ValueError, match="collection name"):
            store.collection("Bad Name")
    with pytest.raises(StateUnavailable, match="the 'state' plugin"):
        store_of(server)  # closed at shutdown, and gone


def test_an_unknown_scheme_stops_start_up_naming_it_without_the_password() -> None:
    with pytest.raises(UsageError, match=r"'redis://'") as caught:
        make_app(settings={"state_url": "redis://user:hunter2@cache:6379/0"})
    assert "hunter2" not in str(caught.value)


def test_a_sqlite_url_without_its_plugin_stops_start_up_naming_the_plugin(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'state.db'}"
    with pytest.raises(UsageError) as caught:
        make_app(settings={"state_url": url})  # the kit loads only the plugins a test names
    assert str(caught.value) == (
        f"--state-url {url}: no loaded plugin serves 'sqlite://' state URLs: the 'state-sqlite' plugin"
        " (flexserv-state-sqlite) serves them, but it is not loaded (pip install flexserv-state-sqlite;"
        " FLEXSERV_PLUGINS, when set, must name it). Or choose another store with --state-url (memory:// is built"
        " in, and lost at exit)."
    )
    with pytest.raises(
        UsageError,
        match=r"'state-sqlite' plugin \(flexserv-state-sqlite\) serves them, but it is blocked \(drop -p no:state-sqlite\)\.",
    ):
        make_app(settings={"state_url": url}, block=["state-sqlite"])
    assert not (tmp_path / "state.db").exists()


async def test_the_default_store_without_its_plugin_is_memory_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="flexserv_state.plugin"):
        app = make_app(settings={"state_url": None, "cache_dir": str(tmp_path)}, block=["state-sqlite"])
    server: FlexServer = app.state.flexserv
    async with app_client(app):
        assert isinstance(store_of(server).backend, MemoryBackend)
    [warning] = [
        r.getMessage() for r in caplog.records if r.name == "flexserv_state.plugin" and r.levelno >= logging.WARNING
    ]
    assert warning.startswith(
        f"The default state store is not available (--state-url sqlite://{tmp_path.absolute()}/state.db: no loaded"
        " plugin serves 'sqlite://' state URLs: the 'state-sqlite' plugin (flexserv-state-sqlite) serves them, but it"
        " is blocked (drop -p no:state-sqlite)."
    )
    assert "Keeping state in memory:// instead: stored responses, files and fitted models are lost at exit." in warning
    assert not (tmp_path / "state.db").exists()


async def test_each_api_key_owns_its_records() -> None:
    app = make_app([OwnerPlugin()], settings={"api_key": ["alpha", "beta"], "state_url": "memory://"})
    async with app_client(app) as client:
        a1 = (await client.get("/v1/notes", headers={"Authorization": "Bearer alpha"})).json()
        a2 = (await client.get("/v1/notes", headers={"Authorization": "Bearer alpha"})).json()
        b1 = (await client.get("/v1/notes", headers={"Authorization": "Bearer beta"})).json()
    assert a1["owner"] == a2["owner"] == key_identity(b"alpha") and a2["count"] == 2
    assert b1["owner"] == key_identity(b"beta") and b1["count"] == 1
    assert "alpha" not in a1["owner"]


async def test_without_api_keys_the_owner_is_none() -> None:
    app = make_app([OwnerPlugin()], settings={"state_url": "memory://"})
    async with app_client(app) as client:
        body = (await client.get("/v1/notes")).json()
    assert body == {"owner": None, "count": 1, "reads_any": False}
    assert isinstance(client, httpx.AsyncClient)


async def test_keys_with_the_operations_scope_read_every_owner(tmp_path: Any) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("user-key inference\nops-key inference,operations\nall-key\n")
    app = make_app([OwnerPlugin()], settings={"api_keys_file": str(keys), "state_url": "memory://"})
    async with app_client(app) as client:
        reads = {
            key: (await client.get("/v1/notes", headers={"Authorization": f"Bearer {key}"})).json()["reads_any"]
            for key in ("user-key", "ops-key", "all-key")
        }
    assert reads == {"user-key": False, "ops-key": True, "all-key": True}


def test_the_plugin_declares_its_hook_and_serves_memory() -> None:
    from flexserv_core.testing import make_plugin_manager

    pm = make_plugin_manager(["state-sqlite", "state"])  # a backend plugin may register before the owner
    assert pm.hook.flexserv_state_backend.has_spec()
    assert pm.infos["state"].distribution == "flexserv-state"
    assert "flexserv_state_backend" in pm.infos["state-sqlite"].hooks
    # the hook is the distribution's (entry points flexserv.hookspecs): blocking the plugin keeps it, so
    # a backend still registers, and nothing calls it
    blocked = make_plugin_manager(["state-sqlite"], block=["state"])
    assert blocked.hook.flexserv_state_backend.has_spec()
    assert blocked.infos["state-sqlite"].status == "loaded"
