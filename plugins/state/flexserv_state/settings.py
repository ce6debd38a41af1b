"""The state plugin's one setting: where the store is."""

from __future__ import annotations

from typing import Annotated

import msgspec


class StateSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``state_url`` carries the plugin's prefix (``state``) already, so the flag,
    environment variable and config key users know are unchanged: ``--state-url``,
    ``FLEXSERV_STATE_URL``, ``state_url``. Under ``-p no:state`` the environment
    variable and the config key are ignored with a warning (the flag is unknown)."""

    state_url: Annotated[
        str | None,
        msgspec.Meta(
            description=(
                "Where the server keeps what clients create (stored responses, files, fitted models):"
                " sqlite:///PATH (default: state.db under the cache directory; one machine, any number of processes;"
                " the state-sqlite plugin, on by default: without it the default is memory:// with a warning),"
                " postgresql://USER:PASSWORD@HOST/DB (replicas on several machines, with flexserv-state-postgres)"
                " or memory:// (lost at exit)."
            ),
            extra={"secret": True, "metavar": "URL"},
        ),
    ] = None
