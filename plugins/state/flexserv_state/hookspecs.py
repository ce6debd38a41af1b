"""The hook this library owns: ``flexserv_state_backend``.

The distribution declares this module in the entry-point group
``flexserv.hookspecs``, so every FlexServ plugin manager knows the hook once
flexserv-state is installed, whatever order entry points load in (a backend
plugin implements it with a plain ``@hookimpl``; under ``-p no:state`` it still
registers, and nothing calls it). ``docs/hooks.md`` lists it with the core's
hooks (``make hook-docs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexserv_core import hookspec

if TYPE_CHECKING:
    from flexserv_core import Settings
    from flexserv_state.backend import StateBackend


# --- state store -------------------------------------------------------------------


@hookspec(firstresult=True)
def flexserv_state_backend(url: str, settings: Settings) -> StateBackend | None:
    """Provide the state store for ``--state-url`` when its scheme is the plugin's.

    Declared by the ``state`` plugin (``flexserv-state``), which calls it once while
    the app is built, before the server exists, with the configured URL (or the
    default, a SQLite file under the cache directory). Only make the object here:
    the ``state`` plugin awaits its ``open()`` at start-up (where it connects and
    migrates) and its ``close()`` at shutdown. The ``state`` plugin serves
    ``memory://``; the first-party plugins ``state-sqlite`` (on by default) and
    ``state-postgres`` serve ``sqlite://`` and ``postgresql://``. Implement it
    with a plain ``@hookimpl`` and depend on ``flexserv-state``, whose entry point
    in ``flexserv.hookspecs`` declares the hook. See "Writing a state backend" in ``docs/state.md``.

    :param url: the state URL, password included: never log it (``backend.url``
        is the URL without its password).
    :param settings: all resolved settings.

    A URL no plugin serves stops start-up with an error naming the scheme (and the
    first-party plugin that serves it); only the default URL, when no plugin serves
    it, falls back to ``memory://`` with a warning.

    First result; synchronous; return a :class:`~flexserv_state.StateBackend`, or ``None`` for a scheme not the plugin's.
    """
