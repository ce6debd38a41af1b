"""The ``--ray-*`` flags of ``flexserv ray-serve`` and the Ray Serve options they become.

Nothing here imports Ray: the mapping from FlexServ settings to deployment options
is plain data, shared by ``serve.run`` (the command) and the YAML written by
``--emit-config`` (``serve deploy``), and tested without a cluster.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import msgspec

from flexserv_core import __version__

#: Name of the Ray Serve deployment that runs the FlexServ app.
DEPLOYMENT_NAME = "FlexServ"
#: ``import_path`` of the application builder (``serve deploy``, ``serve run``).
IMPORT_PATH = "flexserv_ray.app:build_app"
#: Batch size assumed when no loaded plugin declares ``max_batch_size`` (the fake
#: backend, embedding-only servers).
DEFAULT_MAX_ONGOING = 32
DEFAULT_MAX_QUEUED = 256
#: Prefix of the flags' ``dest``: the command's parser also holds every FlexServ
#: setting, and a value named like a setting (``max_queued_requests``) is taken as it.
DEST_PREFIX = "ray_"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


class RayOptions(msgspec.Struct, kw_only=True):
    """What the ``--ray-*`` flags ask for (``None``: derive it from the settings)."""

    address: str | None = None
    app_name: str = "flexserv"
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    target_ongoing_requests: float | None = None
    upscale_delay: float = 3.0
    downscale_delay: float = 30.0
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int | None = None
    max_ongoing_requests: int | None = None
    max_queued_requests: int | None = None
    overload_status: int = 429
    retry_after: float = 1.0
    models_per_replica: int = 3
    health_check_period: float = 10.0
    health_check_timeout: float = 30.0
    local_cpus: int = 2
    emit_config: str | None = None

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None or self.max_replicas is not None


def parse_size(value: str) -> int:
    """Bytes from ``4GiB``, ``512M``, ``1e9``-free plain integers; for ``--ray-memory``."""
    match = _SIZE.match(value)
    if not match:
        raise argparse.ArgumentTypeError(f"{value!r} is not a size (e.g. 4GiB, 512MiB, 2000000000)")
    number, unit = match.groups()
    unit = (unit or "").lower().removesuffix("b")
    return int(float(number) * _UNITS[unit])


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return number


def _non_negative_float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return number


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's own flags (not FlexServ settings: the app never reads them)."""
    g = parser.add_argument_group("Ray Serve (flexserv-ray)")

    def add(*flags: str, dest: str, **kwargs: Any) -> None:
        g.add_argument(*flags, dest=DEST_PREFIX + dest, **kwargs)

    add("--ray-address", dest="address", metavar="ADDR", default=None,
        help="Ray cluster to join (ray://host:10001, host:6379 or 'auto'); default: $RAY_ADDRESS, "
        "else start a local cluster on 127.0.0.1 and stop it on exit.")  # fmt: skip
    add("--ray-app-name", dest="app_name", default="flexserv", metavar="NAME", help="Ray Serve application name.")
    add("--ray-replicas", dest="replicas", type=_positive_int, default=1, metavar="N",
        help="Fixed number of replicas (ignored with --ray-min/max-replicas).")  # fmt: skip
    add("--ray-min-replicas", dest="min_replicas", type=_non_negative_int, default=None, metavar="N",
        help="Autoscale: fewest replicas (0 scales to zero when idle).")  # fmt: skip
    add("--ray-max-replicas", dest="max_replicas", type=_positive_int, default=None, metavar="N",
        help="Autoscale: most replicas.")  # fmt: skip
    add("--ray-target-ongoing-requests", dest="target_ongoing_requests", type=float, default=None, metavar="R",
        help="Autoscale: requests in flight per replica Ray aims for (default: half of max-ongoing-requests).")  # fmt: skip
    add("--ray-upscale-delay", dest="upscale_delay", type=_non_negative_float, default=3.0, metavar="S",
        help="Autoscale: seconds of sustained load before adding a replica.")  # fmt: skip
    add("--ray-downscale-delay", dest="downscale_delay", type=_non_negative_float, default=30.0, metavar="S",
        help="Autoscale: seconds of low load before removing a replica.")  # fmt: skip
    add("--ray-num-cpus", dest="num_cpus", type=_non_negative_float, default=1.0, metavar="C",
        help="CPUs reserved per replica (Ray also caps the replica's OMP threads at this).")  # fmt: skip
    add("--ray-num-gpus", dest="num_gpus", type=_non_negative_float, default=0.0, metavar="G",
        help="GPUs per replica (fractions share a GPU).")  # fmt: skip
    add("--ray-memory", dest="memory", type=parse_size, default=None, metavar="SIZE",
        help="Memory reserved per replica for scheduling, e.g. 4GiB.")  # fmt: skip
    add("--ray-max-ongoing-requests", dest="max_ongoing_requests", type=_positive_int, default=None, metavar="N",
        help="Requests Ray sends one replica at once (default: the engine's --transformers-max-batch-size).")  # fmt: skip
    add("--ray-max-queued-requests", dest="max_queued_requests", type=int, default=None, metavar="N",
        help="Requests the proxy holds while every replica is full; more are refused "
        "(default: the engine's --transformers-max-queued-requests; -1 never refuses).")  # fmt: skip
    add("--ray-overload-status", dest="overload_status", type=int, choices=(429, 503), default=429,
        help="Status of a request refused by the proxy when the queue is full.")  # fmt: skip
    add("--ray-retry-after", dest="retry_after", type=_non_negative_float, default=1.0, metavar="S",
        help="Retry-After (seconds) sent with a request the proxy refused, or whose replica was lost.")  # fmt: skip
    add("--ray-models-per-replica", dest="models_per_replica", type=_positive_int, default=3, metavar="N",
        help="Multiplexing: models one replica keeps loaded (least recently used is unloaded).")  # fmt: skip
    add("--ray-health-check-period", dest="health_check_period", type=_non_negative_float, default=10.0,
        metavar="S", help="Seconds between Ray's readiness checks of a replica.")  # fmt: skip
    add("--ray-health-check-timeout", dest="health_check_timeout", type=_non_negative_float, default=30.0,
        metavar="S", help="Seconds a readiness check may take before the replica is replaced.")  # fmt: skip
    add("--ray-local-cpus", dest="local_cpus", type=_positive_int, default=2, metavar="N",
        help="CPUs a local cluster started by this command may use.")  # fmt: skip
    add("--emit-config", dest="emit_config", metavar="FILE", default=None,
        help="Write a Ray Serve config (YAML) for 'serve deploy' and exit; '-' writes to stdout.")  # fmt: skip


def ray_options_from(args: argparse.Namespace) -> RayOptions:
    """The ``--ray-*`` flags of a parsed command line (other values are ignored)."""
    names = set(RayOptions.__struct_fields__)
    values = {k.removeprefix(DEST_PREFIX): v for k, v in vars(args).items() if k.startswith(DEST_PREFIX)}
    return RayOptions(**{k: v for k, v in values.items() if k in names})


def deployment_options(
    options: RayOptions, settings_values: dict[str, Any], *, shutdown_timeout: float
) -> dict[str, Any]:
    """Keyword arguments of ``Deployment.options`` (and the YAML ``deployments`` entry).

    Back-pressure follows the engine's own limits: a replica takes as many requests
    as it batches (``max_batch_size``), so no request waits inside one replica while
    another is free; the requests the engine would have queued
    (``max_queued_requests``) wait in Ray's proxy instead, and beyond that the proxy
    answers 429 (or 503) with ``Retry-After`` at once rather than let a client hang.
    """
    batch = options.max_ongoing_requests or int(settings_values.get("max_batch_size") or DEFAULT_MAX_ONGOING)
    queued = options.max_queued_requests
    if queued is None:
        queued = int(settings_values.get("max_queued_requests", DEFAULT_MAX_QUEUED))
    actor: dict[str, Any] = {"num_cpus": options.num_cpus}
    if options.num_gpus:
        actor["num_gpus"] = options.num_gpus
    if options.memory:
        actor["memory"] = options.memory
    out: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "max_ongoing_requests": batch,
        "max_queued_requests": queued,
        "backpressure_config": {"status_code": options.overload_status, "retry_after_s": options.retry_after},
        "ray_actor_options": actor,
        # Ray waits this long for a removed replica's requests (streams included)
        # before it kills it: the same budget `flexserv run` gives on SIGTERM.
        "graceful_shutdown_timeout_s": shutdown_timeout,
        "graceful_shutdown_wait_loop_s": 1.0,
        "health_check_period_s": options.health_check_period,
        "health_check_timeout_s": options.health_check_timeout,
    }
    if options.autoscaling:
        low = options.min_replicas if options.min_replicas is not None else 1
        high = options.max_replicas if options.max_replicas is not None else max(low, 1)
        if high < max(low, 1):
            raise ValueError(f"--ray-max-replicas ({high}) is below --ray-min-replicas ({low})")
        out["autoscaling_config"] = {
            "min_replicas": low,
            "max_replicas": high,
            "initial_replicas": max(low, 1),
            "target_ongoing_requests": options.target_ongoing_requests or max(1.0, batch / 2),
            "upscale_delay_s": options.upscale_delay,
            "downscale_delay_s": options.downscale_delay,
        }
    else:
        out["num_replicas"] = options.replicas
    return out


def version_tag() -> str:
    return f"flexserv-{__version__}"
