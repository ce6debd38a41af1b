"""One private PostgreSQL server for the session; each test gets a fresh database."""

from flexserv_state_postgres.testing import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]
