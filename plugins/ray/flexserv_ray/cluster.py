"""Joining a Ray cluster, or starting a local one and stopping only that."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Final

log = logging.getLogger(__name__)

#: What a local cluster's processes get unless the environment says otherwise.
#: Ray's controller gives a starting proxy three readiness checks of 5 s; on a small
#: busy machine (two cores, replicas loading models) the proxy's own start-up took
#: longer, and it was killed as unhealthy before it ever served. A proxy that truly
#: hangs is now found after a minute instead of 15 s.
LOCAL_CLUSTER_ENV: Final[Mapping[str, str]] = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "20"}


class StartInterrupted(Exception):
    """SIGINT/SIGTERM while ``ray.init`` ran (Ray's own handler exits the process)."""


class RayCluster:
    """``with RayCluster(address, local_cpus):`` connects to ``address`` (or
    ``$RAY_ADDRESS``); without either it starts a private local cluster on
    127.0.0.1 with at most ``local_cpus`` CPUs, no dashboard and ``local_env`` in its
    processes' environment (over :data:`LOCAL_CLUSTER_ENV`), and on exit shuts down
    that cluster and nothing else. A joined cluster is left running."""

    def __init__(self, address: str | None, *, local_cpus: int, local_env: Mapping[str, str] | None = None) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.local_cpus = local_cpus
        #: Environment of a local cluster's processes (Ray's proxy reads its middleware from it).
        self.local_env = {**LOCAL_CLUSTER_ENV, **(local_env or {})}
        self.started_here = False

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
            raise StartInterrupted from exc

    def _init(self) -> None:
        import ray

        if self.address:
            ray.init(address=self.address, logging_level=logging.WARNING)
        else:
            # Ray's processes inherit this process's environment when it starts them.
            for name, value in self.local_env.items():
                if os.environ.setdefault(name, value) != value:
                    log.warning("%s is set to %r: kept, instead of %r", name, os.environ[name], value)
            # address="local" always starts a new cluster, never one another user runs.
            ray.init(
                address="local",
                num_cpus=self.local_cpus,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                logging_level=logging.WARNING,
            )
            self.started_here = True

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
                serve.shutdown()
            finally:
                ray.shutdown()
        else:
            ray.shutdown()  # disconnects this driver; the cluster keeps running
