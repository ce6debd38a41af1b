"""``flexserv ray-serve``: the FlexServ app, unchanged, as Ray Serve replicas.

The core's CLI resolves the settings exactly as for ``flexserv run`` (``-p``
plugins, ``--config`` file, ``FLEXSERV_*`` environment, every setting's flag) and
checks them before :func:`run` is called; the ``--ray-*`` flags say how to deploy
(see :mod:`flexserv_ray.options`).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from flexserv_core import CommandContext, Settings, UsageError
from flexserv_ray.app_args import app_args_from, setting_value
from flexserv_ray.local_node import free_port
from flexserv_ray.options import RayOptions, deployment_options, ray_options_from
from flexserv_ray.serve_config import render, serve_config

if TYPE_CHECKING:
    from flexserv_ray.cluster import RayCluster

log = logging.getLogger("flexserv_ray")


def _check_unsupported(settings: Settings) -> None:
    """Settings of ``flexserv run``'s own listener that Ray's proxy cannot honour."""
    core = settings.core
    if core.ssl_keyfile or core.ssl_certfile:
        raise UsageError(
            "--ssl-keyfile/--ssl-certfile: Ray's proxy serves plain HTTP; terminate TLS in front of it "
            "(a load balancer or ingress)"
        )


def _deployment(options: RayOptions, settings: Settings) -> dict[str, Any]:
    # the transformers engine's limits, under the names deployment_options reads
    engine_limits = {
        name: setting_value(settings, f"transformers_{name}") for name in ("max_batch_size", "max_queued_requests")
    }
    try:
        return deployment_options(
            options,
            {k: v for k, v in engine_limits.items() if v is not None},
            shutdown_timeout=settings.core.shutdown_timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


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


class _Interrupted(Exception):
    """SIGINT/SIGTERM while the application was being deployed."""


class StopSignals:
    """SIGINT and SIGTERM ask the command to stop, never kill it mid-way.

    While Ray starts a signal is only recorded (a half-started local cluster would be
    left behind) and a local node's start is abandoned. While the application deploys (replicas loading
    models can take minutes) it interrupts the deployment. Once serving, it ends the
    wait. Each time, the caller then deletes the application (replicas drain) and
    stops the cluster it started.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.interruptible = False

    def install(self) -> None:
        # Again after ray.init, which installs its own SIGTERM handler (an abrupt exit).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.stop.set()
        if self.interruptible:
            self.interruptible = False
            raise _Interrupted


def serve_forever(plugins: list[str], settings: Settings, options: RayOptions) -> int:
    from flexserv_ray.cluster import RayCluster, StartInterrupted
    from flexserv_ray.proxy_errors import proxy_env

    host = settings.core.host
    port = settings.core.port or free_port(host)
    deployment = _deployment(options, settings)
    app_args = app_args_from(plugins, settings, models_per_replica=options.models_per_replica, include_secrets=True)
    signals = StopSignals()
    signals.install()
    cluster = RayCluster(
        options.address,
        local_cpus=options.local_cpus,
        local_env=proxy_env(options.retry_after),
        stop_timeout=settings.core.shutdown_timeout,
        interrupted=signals.stop,
    )
    cluster.prepare()
    from ray import serve

    from flexserv_ray.app import application

    try:
        cluster.start()
    except StartInterrupted:
        print("stopping: asked to stop while Ray started", flush=True)
        return 0
    try:
        signals.install()
        if signals.stop.is_set():
            print("stopping: asked to stop while Ray started", flush=True)
            return 0
        deployed = False
        try:
            signals.interruptible = True
            serve.start(http_options={"host": host, "port": port})
            deployed = True
            serve.run(application(app_args, deployment), name=options.app_name, route_prefix="/")
            signals.interruptible = False
            _print_address(host, port, deployment, options.app_name, cluster)
            if not cluster.started_here:
                _note_proxy_errors()
            signals.stop.wait()
        except _Interrupted:
            print("stopping: asked to stop while the application deployed", flush=True)
        finally:
            signals.interruptible = False
            if deployed:
                print("stopping: draining replicas", flush=True)
                serve.delete(options.app_name)  # replicas finish their requests within graceful_shutdown_timeout_s
    finally:
        cluster.stop()  # the cluster started here, or only this driver's connection
    return 0


def _print_address(host: str, port: int, deployment: dict[str, Any], app_name: str, cluster: RayCluster) -> None:
    where = "a local Ray cluster (stopped on exit)" if cluster.started_here else f"Ray cluster {cluster.address}"
    if "autoscaling_config" in deployment:
        auto = deployment["autoscaling_config"]
        scale = f"{auto['min_replicas']}-{auto['max_replicas']} replicas (autoscaling)"
    else:
        scale = f"{deployment['num_replicas']} replica(s)"
    print(f"FlexServ on Ray Serve listening on http://{host}:{port} ({scale}, app {app_name!r}, {where})")
    print(f"  OpenAI API: http://{host}:{port}/v1   health: http://{host}:{port}/v1/flexserv/health", flush=True)


def _note_proxy_errors() -> None:
    from flexserv_ray.proxy_errors import PROXY_CALLBACK, PROXY_CALLBACK_ENV

    print(
        f"  note: on a cluster this command did not start, Ray's proxy answers overload and a lost replica "
        f"in plain text unless its nodes run with {PROXY_CALLBACK_ENV}={PROXY_CALLBACK} (see the plugin's README)",
        flush=True,
    )


def run(context: CommandContext) -> int:
    """``flexserv ray-serve``: ``context.settings`` were resolved and checked by the CLI."""
    settings = context.settings
    assert settings is not None, "the command is registered with settings=True"
    options = ray_options_from(context.args)
    plugins = list(context.plugin_args)
    _check_unsupported(settings)
    if options.emit_config:
        emit_config(plugins, settings, options, options.emit_config)
        return 0
    return serve_forever(plugins, settings, options)
