"""What a replica needs to rebuild the command's FlexServ app, as plain data.

A built Litestar app does not pickle, and a replica may run on a node that has
neither the command's config file nor its environment. So the command resolves
settings exactly as ``flexserv run`` does (CLI > environment > config file >
defaults), keeps every value that did not come from a default, and sends those by
name; the replica resolves them again against the same plugins, with its own
environment beneath them (where secrets such as ``FLEXSERV_API_KEY`` belong when
the config is written to a file).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from flexserv_state import StateSettings, resolved_state_url

from flexserv_core import FlexServPluginManager, Settings, create_plugin_manager, resolve_plugin_settings

#: Settings of the listening socket: Ray's proxy listens, a replica never does.
PROXY_SETTINGS = frozenset({"host", "port", "ssl_keyfile", "ssl_certfile"})
#: Environment variables that change which plugins load; forwarded to replicas.
PLUGIN_ENV_VARS = ("FLEXSERV_PLUGINS", "FLEXSERV_DISABLE_PLUGIN_AUTOLOAD")


class AppArgs(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``args`` of the Ray Serve application (see :func:`flexserv_ray.app.build_app`)."""

    plugins: list[str] = msgspec.field(default_factory=list)
    plugin_env: dict[str, str] = msgspec.field(default_factory=dict)
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    models_per_replica: int = 3


def explicit_settings(settings: Settings, *, include_secrets: bool) -> dict[str, Any]:
    """Every setting that was set (CLI, environment or config file), by name."""
    out: dict[str, Any] = {}
    for field in settings.fields:
        if field.name not in settings.origins or (field.secret and not include_secrets):
            continue
        out[field.name] = msgspec.to_builtins(getattr(settings.get(field.owner), field.name))
    return out


def setting_value(settings: Settings, name: str, default: Any = None) -> Any:
    """A setting by name, whichever plugin declares it (``transformers_max_batch_size``...)."""
    for field in settings.fields:
        if field.name == name:
            return getattr(settings.get(field.owner), name)
    return default


def app_args_from(
    plugin_args: Sequence[str],
    settings: Settings,
    *,
    models_per_replica: int,
    include_secrets: bool,
    env: Mapping[str, str] | None = None,
) -> AppArgs:
    env = os.environ if env is None else env
    explicit = explicit_settings(settings, include_secrets=include_secrets)
    if include_secrets and any(f.owner is StateSettings for f in settings.fields):
        # every replica opens the command's state store (the default one included); none under -p no:state
        explicit["state_url"] = resolved_state_url(settings)
    return AppArgs(
        plugins=list(plugin_args),
        plugin_env={k: env[k] for k in PLUGIN_ENV_VARS if k in env},
        settings={k: v for k, v in explicit.items() if k not in PROXY_SETTINGS},
        models_per_replica=models_per_replica,
    )


def rebuild(
    args: AppArgs, *, extra_plugins: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None
) -> tuple[FlexServPluginManager, Settings]:
    """The plugin manager and settings of the command, rebuilt in a replica.

    ``extra_plugins`` (name -> plugin object) are registered next to the selected
    ones, before the settings are resolved.
    """
    env = os.environ if env is None else env
    plugin_env = {k: v for k, v in env.items() if k not in PLUGIN_ENV_VARS} | args.plugin_env
    pm = create_plugin_manager(args.plugins, env=plugin_env)
    for name, plugin in (extra_plugins or {}).items():
        pm.register_plugin(plugin, name)
    # The command's values win; the replica's own environment fills in beneath them
    # (secrets left out of a config file), as for `flexserv run`. No config file:
    # its values are already among the command's.
    settings = resolve_plugin_settings(pm, cli=args.settings, env=env)
    return pm, settings
