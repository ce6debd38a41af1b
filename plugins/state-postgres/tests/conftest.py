"""One private PostgreSQL server for the session; each test gets a fresh database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flexserv_state_postgres.testing import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database()
