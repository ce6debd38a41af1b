"""``flexserv ray-serve``: the FlexServ app, unchanged, as Ray Serve replicas.

Settings are resolved exactly as ``flexserv run`` resolves them (``-p`` plugins,
``--config`` file, ``FLEXSERV_*`` environment, every setting's flag); the
``--ray-*`` flags say how to deploy (see :mod:`flexserv_ray.options`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

from flexserv_core import hooks
from flexserv_core.errors import PluginLoadError, UsageError
from flexserv_core.plugin_manager import create_plugin_manager
from flexserv_core.settings import Settings, add_arguments, resolve_settings
from flexserv_ray.app_args import app_args_from, setting_value
from flexserv_ray.options import RayOptions, add_ray_arguments, deployment_options, ray_options_from
from flexserv_ray.serve_config import render, serve_config

EXIT_USAGE = 2
EXIT_PLUGIN = 3
PROG = "flexserv ray-serve"

log = logging.getLogger("flexserv_ray")


def _selection_parser() -> argparse.ArgumentParser:
    # The same two first-pass options as `flexserv run`: they decide which plugins
    # (and so which settings) exist before the full parser is built.
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-p", dest="plugins", action="append", default=[], metavar="NAME",
                        help="Load plugin NAME (entry-point name or dotted module); -p no:NAME blocks it.")  # fmt: skip
    parser.add_argument("--config", metavar="FILE", default=os.environ.get("FLEXSERV_CONFIG"),
                        help="TOML settings file (keys are setting names) [env FLEXSERV_CONFIG].")  # fmt: skip
    return parser


def _parse(argv: Sequence[str]) -> tuple[list[str], Settings, RayOptions]:
    selection, _ = _selection_parser().parse_known_args(argv)
    pm = create_plugin_manager(selection.plugins)
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[_selection_parser()],
        description="Serve the FlexServ app on Ray Serve: replicas or autoscaling, multiplexed models, "
        "back-pressure, a config file for 'serve deploy'.",
    )
    structs = hooks.settings_structs(pm)
    add_arguments(parser, structs)
    add_ray_arguments(parser)
    args = parser.parse_args(argv)
    options = ray_options_from(args)
    ray_keys = set(RayOptions.__struct_fields__)
    cli = {k: v for k, v in vars(args).items() if k not in ray_keys | {"plugins", "config"}}
    settings = resolve_settings(structs, cli=cli, config_file=args.config)
    hooks.configure(pm, settings)  # plugins reject bad values here, before anything is deployed
    return list(selection.plugins), settings, options


def _deployment(options: RayOptions, settings: Settings) -> dict[str, Any]:
    engine_limits = {name: setting_value(settings, name) for name in ("max_batch_size", "max_queued_requests")}
    try:
        return deployment_options(
            options,
            {k: v for k, v in engine_limits.items() if v is not None},
            shutdown_timeout=settings.core.shutdown_timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def emit_config(plugins: list[str], settings: Settings, options: RayOptions, path: str) -> None:
    app_args = app_args_from(plugins, settings, models_per_replica=options.models_per_replica, include_secrets=False)
    config = serve_config(
        app_args,
        _deployment(options, settings),
        app_name=options.app_name,
        host=settings.core.host,
        port=settings.core.port or 8000,
    )
    text = render(config)
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote a Ray Serve config to {path}: deploy it with `serve deploy {path}`")


def serve_forever(plugins: list[str], settings: Settings, options: RayOptions) -> int:
    from ray import serve

    from flexserv_ray.app import application
    from flexserv_ray.cluster import RayCluster

    host = settings.core.host
    port = settings.core.port or _free_port(host)
    deployment = _deployment(options, settings)
    app_args = app_args_from(plugins, settings, models_per_replica=options.models_per_replica, include_secrets=True)
    stop = threading.Event()
    with RayCluster(options.address, local_cpus=options.local_cpus) as cluster:
        serve.start(http_options={"host": host, "port": port})
        serve.run(application(app_args, deployment), name=options.app_name, route_prefix="/")
        # After ray.init, which installs its own SIGTERM handler (an abrupt exit).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        where = "a local Ray cluster (stopped on exit)" if cluster.started_here else f"Ray cluster {cluster.address}"
        scale = (
            f"{deployment['autoscaling_config']['min_replicas']}-{deployment['autoscaling_config']['max_replicas']} replicas (autoscaling)"
            if "autoscaling_config" in deployment
            else f"{deployment['num_replicas']} replica(s)"
        )
        print(f"FlexServ on Ray Serve listening on http://{host}:{port} ({scale}, app {options.app_name!r}, {where})")
        print(f"  OpenAI API: http://{host}:{port}/v1   health: http://{host}:{port}/v1/flexserv/health", flush=True)
        stop.wait()
        print("stopping: draining replicas", flush=True)
        serve.delete(options.app_name)  # replicas finish their requests within graceful_shutdown_timeout_s
    return 0


def ray_serve_main(argv: Sequence[str]) -> int:
    """``flexserv ray-serve ARGS``; returns the exit status."""
    try:
        plugins, settings, options = _parse(list(argv))
        logging.basicConfig(
            level=settings.core.log_level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
        )
        if options.emit_config:
            emit_config(plugins, settings, options, options.emit_config)
            return 0
        return serve_forever(plugins, settings, options)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except PluginLoadError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_PLUGIN


def main(argv: Sequence[str] | None = None) -> int:
    """The ``flexserv-ray`` console script (``flexserv-ray --help``)."""
    return ray_serve_main(sys.argv[1:] if argv is None else argv)
