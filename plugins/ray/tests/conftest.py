"""A private PostgreSQL server for the replicas' shared state (the state-postgres plugin's fixtures)."""

from flexserv_state_postgres.testing import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]
