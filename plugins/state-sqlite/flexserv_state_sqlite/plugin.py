"""Serves ``sqlite:///PATH`` state URLs, the default store (``state.db`` under the
cache directory when ``--state-url`` is not set)."""

from __future__ import annotations

from flexserv_state import StateBackend, scheme_of

from flexserv_core import Settings, UsageError, hookimpl


@hookimpl  # a hook flexserv-state owns
def flexserv_state_backend(url: str, settings: Settings) -> StateBackend | None:
    if scheme_of(url) != "sqlite":
        return None
    from flexserv_state_sqlite.backend import SqliteBackend, sqlite_path

    try:
        sqlite_path(url)
    except ValueError as exc:
        raise UsageError(f"--state-url: {exc}") from None
    return SqliteBackend(url)
