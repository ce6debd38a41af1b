"""Serves ``postgresql://`` (and ``postgres://``) state URLs."""

from __future__ import annotations

from flexserv_core import Settings, StateBackend, hookimpl

SCHEMES = ("postgresql", "postgres")


@hookimpl
def flexserv_state_backend(url: str, settings: Settings) -> StateBackend | None:
    scheme = url.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme not in SCHEMES:
        return None
    from flexserv_state_postgres.backend import PostgresBackend  # psycopg only when it is used

    return PostgresBackend(url)
