"""Joining a Ray cluster, or starting a local one and stopping only that."""

from __future__ import annotations

import logging
import os
from types import TracebackType

log = logging.getLogger(__name__)


class RayCluster:
    """``with RayCluster(address, local_cpus):`` connects to ``address`` (or
    ``$RAY_ADDRESS``); without either it starts a private local cluster on
    127.0.0.1 with at most ``local_cpus`` CPUs and no dashboard, and on exit shuts
    down that cluster and nothing else. A joined cluster is left running."""

    def __init__(self, address: str | None, *, local_cpus: int) -> None:
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.local_cpus = local_cpus
        self.started_here = False

    def __enter__(self) -> RayCluster:
        import ray

        if self.address:
            ray.init(address=self.address, logging_level=logging.WARNING)
        else:
            # address="local" always starts a new cluster, never one another user runs.
            ray.init(
                address="local",
                num_cpus=self.local_cpus,
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                logging_level=logging.WARNING,
            )
            self.started_here = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import ray

        if self.started_here:
            from ray import serve

            try:
                serve.shutdown()
            finally:
                ray.shutdown()
        else:
            ray.shutdown()  # disconnects this driver; the cluster keeps running
