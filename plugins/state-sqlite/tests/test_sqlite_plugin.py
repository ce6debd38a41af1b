"""The plugin's wiring: with it loaded the default store is ``state.db`` under the
cache directory, a malformed ``sqlite://`` URL is a usage error, and a real
``flexserv run`` that blocks it stops on an explicit ``sqlite://`` URL naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from flexserv_state import resolved_state_url, store_of
from flexserv_state_sqlite.backend import SqliteBackend

from flexserv_core import FlexServer, UsageError
from flexserv_core.testing import app_client, free_port, make_app, run_flexserv


async def test_the_default_store_is_a_sqlite_file_under_the_cache_directory(tmp_path: Path) -> None:
    app = make_app(["state-sqlite"], settings={"state_url": None, "cache_dir": str(tmp_path)})
    server: FlexServer = app.state.flexserv
    async with app_client(app) as client:
        store = store_of(server)
        assert isinstance(store.backend, SqliteBackend)
        assert store.url == resolved_state_url(server.settings) == f"sqlite://{tmp_path.absolute()}/state.db"
        assert (await client.get("/health")).status_code == 200
    assert (tmp_path / "state.db").is_file() and (tmp_path / "state.db.blobs").is_dir()


def test_a_sqlite_url_with_a_query_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--state-url: state URL .* expected sqlite:///PATH \(no query\)"):
        make_app(["state-sqlite"], settings={"state_url": f"sqlite://{tmp_path}/state.db?mode=ro"})


@pytest.mark.slow  # a real process, with every installed plugin but this one
def test_flexserv_run_without_the_plugin_names_it(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/state.db"
    result = run_flexserv("run", "-p", "no:state-sqlite", "--port", str(free_port()), "--state-url", url, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert f"--state-url {url}: no loaded plugin serves 'sqlite://' state URLs" in output
    assert "the 'state-sqlite' plugin (flexserv-state-sqlite) serves them, but it is blocked" in output
    assert not (tmp_path / "state.db").exists()
