"""Joining a Ray cluster, or starting a local one and stopping only that."""

from __future__ import annotations

import logging
import os
import secrets
import sys
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Final

from flexserv_ray.local_node import LocalNode

log = logging.getLogger(__name__)

#: What a local cluster's processes get unless the environment says otherwise.
#: Ray's controller gives a starting proxy three readiness checks of 5 s; on a small
#: busy machine (two cores, replicas loading models) the proxy's own start-up took
#: longer, and it was killed as unhealthy before it ever served. A proxy that truly
#: hangs is now found after a minute instead of 15 s.
#: Ray's settings for token authentication; any of them in the environment is left to Ray.
RAY_AUTH_ENV: Final = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")

#: The node is stopped after Serve has shut down, so its own drain on SIGTERM only waits.
LOCAL_CLUSTER_ENV: Final[Mapping[str, str]] = {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "20",
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
}


class StartInterrupted(Exception):
    """SIGINT/SIGTERM while the cluster started (or ``ray.init`` ran: Ray's own handler exits the process)."""


class RayCluster:
    """``with RayCluster(address, local_cpus):`` connects to ``address`` (or
    ``$RAY_ADDRESS``); without either it starts a private local cluster on
    127.0.0.1 with at most ``local_cpus`` CPUs, no dashboard and ``local_env`` in its
    processes' environment (over :data:`LOCAL_CLUSTER_ENV`), and on exit shuts down
    that cluster and nothing else. A joined cluster is left running.

    The local cluster's processes run in a session of their own (see
    :class:`~flexserv_ray.local_node.LocalNode`): Ctrl-C in a terminal reaches this
    process only, which shuts Serve down while its controller and replicas still
    run, and then stops the node by its process group.
    """

    def __init__(
        self,
        address: str | None,
        *,
        local_cpus: int,
        local_env: Mapping[str, str] | None = None,
        stop_timeout: float = 10.0,
        interrupted: threading.Event | None = None,
    ) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.local_cpus = local_cpus
        #: Environment of a local cluster's processes (Ray's proxy reads its middleware from it).
        self.local_env = {**LOCAL_CLUSTER_ENV, **(local_env or {})}
        self.stop_timeout = stop_timeout
        #: Set by the caller's signal handler: a local node's start is abandoned.
        self.interrupted = interrupted or threading.Event()
        self.started_here = False
        self.node: LocalNode | None = None

    def prepare(self) -> None:
        """Call before Ray is imported. A local cluster admits only holders of a fresh
        token: this process and the node's processes, which inherit the environment. (Ray
        reads its authentication mode once, on import; a token file of the user's would
        make ``ray start`` require it while a driver given an address does not send it.)"""
        if self.address or any(name in os.environ for name in RAY_AUTH_ENV):
            return
        if "ray" in sys.modules:
            log.warning("Ray was imported before the local cluster's token was set: connecting may be refused")
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

    def __enter__(self) -> RayCluster:
        self.start()
        return self

    def start(self) -> None:
        """Join or start the cluster; :class:`StartInterrupted` if a signal stopped it."""
        import ray

        try:
            self._init()
        except (SystemExit, KeyboardInterrupt) as exc:
            # ray.init answers SIGTERM with sys.exit: stop what it had started, and only that.
            ray.shutdown()
            self._stop_node()
            raise StartInterrupted from exc
        except BaseException:
            self._stop_node()
            raise

    def _init(self) -> None:
        import ray

        if self.address:
            ray.init(address=self.address, logging_level=logging.WARNING)
        else:
            env = dict(os.environ)
            for name, value in self.local_env.items():
                if env.setdefault(name, value) != value:
                    log.warning("%s is set to %r: kept, instead of %r", name, env[name], value)
            self.node = LocalNode(num_cpus=self.local_cpus, env=env, stop_timeout=self.stop_timeout)
            self.started_here = True
            if not self.node.start(self.interrupted):
                raise StartInterrupted
            ray.init(address=self.node.address, _node_ip_address="127.0.0.1", logging_level=logging.WARNING)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the cluster started here (Serve first), or only disconnect from a joined one."""
        import ray

        if self.started_here:
            from ray import serve

            try:
                if ray.is_initialized():
                    serve.shutdown()
            finally:
                try:
                    ray.shutdown()  # this driver leaves before the node goes: no lost-GCS errors
                finally:
                    self._stop_node()
        else:
            ray.shutdown()  # disconnects this driver; the cluster keeps running

    def _stop_node(self) -> None:
        node, self.node = self.node, None
        if node is not None:
            node.stop()
