"""Serves ``postgresql://`` (and ``postgres://``) state URLs."""

from __future__ import annotations

from flexserv_state import StateBackend, scheme_of

from flexserv_core import Settings, hookimpl

SCHEMES = ("postgresql", "postgres")


@hookimpl  # a hook flexserv-state owns
def flexserv_state_backend(url: str, settings: Settings) -> StateBackend | None:
    if scheme_of(url) not in SCHEMES:
        return None
    from flexserv_state_postgres.backend import PostgresBackend  # psycopg only when it is used

    return PostgresBackend(url)
