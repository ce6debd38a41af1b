"""Apps with the ``files`` plugin (and ``ocr`` for reading uploads), state in a SQLite file per module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from litestar import Litestar

from flexserv_core.testing import make_app, running_app_client


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def files_settings() -> dict[str, Any]:
    return {}


@pytest.fixture(scope="module")
def files_app(state_dir: Path, files_settings: dict[str, Any]) -> Litestar:
    settings = {"state_url": f"sqlite:///{state_dir / 'state.db'}", **files_settings}
    return make_app(["files", "ocr", "state-sqlite"], settings=settings)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(files_app: Litestar) -> AsyncIterator[Any]:
    async with running_app_client(files_app) as c:
        yield c


@pytest.fixture(scope="module")
def stored_files(state_dir: Path) -> Callable[[], list[Path]]:
    """Lists everything on disk under the state directory except the database itself."""

    def files() -> list[Path]:
        return sorted(p for p in state_dir.rglob("*") if p.is_file() and not p.name.startswith("state.db"))

    return files
