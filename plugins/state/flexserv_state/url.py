"""State URLs: the scheme chooses the backend; a password never reaches a log."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from flexserv_core import Settings, default_cache_dir


def scheme_of(url: str) -> str:
    """``"sqlite"`` for ``sqlite:///path``; ``"postgresql+psycopg"`` counts as ``"postgresql"``."""
    return urlsplit(url).scheme.split("+", 1)[0].lower()


def redact_url(url: str) -> str:
    """``url`` without its password (``postgresql://app:***@db/flexserv``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def resolved_state_url(settings: Settings) -> str:
    """``--state-url``, or the default: a SQLite file under the cache directory."""
    from flexserv_state.settings import StateSettings

    configured = settings.get(StateSettings).state_url
    if configured:
        return configured
    return f"sqlite://{(default_cache_dir(settings) / 'state.db').absolute()}"
