"""The metrics of one server: a Prometheus registry of its own and the core's metrics.

Every app gets a fresh :class:`ServerMetrics` (never prometheus_client's global
registry), so several apps in one process keep separate numbers. Names follow
vLLM's under the ``flexserv:`` prefix (so dashboards written for vLLM need only
the prefix changed); FlexServ's own metrics share the prefix. Every model metric
is labelled ``model_name``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

from flexserv_core.events import ModelEvent, ModelEventType

PREFIX = "flexserv:"
MODEL = "model_name"

# Bucket bounds in seconds, from milliseconds (a fake backend, a GPU decode step)
# to minutes (a long completion on CPU).
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
)
ITL_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
)
LOAD_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)


class ServerMetrics:
    """The registry and the metrics the core records (see ``docs/api.md`` for the list)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # vLLM-compatible request metrics (text generation).
        self.time_to_first_token = Histogram(
            f"{PREFIX}time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token.",
            [MODEL],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.inter_token_latency = Histogram(
            f"{PREFIX}inter_token_latency_seconds",
            "Time between two successive tokens of one sequence (vLLM: time_per_output_token_seconds).",
            [MODEL],
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e_request_latency = Histogram(
            f"{PREFIX}e2e_request_latency_seconds",
            "Time from a request's arrival to its last token (or its abort).",
            [MODEL],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.request_queue_time = Histogram(
            f"{PREFIX}request_queue_time_seconds",
            "Time from a request's arrival until its model was ready for it (loading included).",
            [MODEL],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            f"{PREFIX}prompt_tokens", "Prompt tokens of text requests (as the responses' usage).", [MODEL], registry=r
        )
        self.generation_tokens = Counter(
            f"{PREFIX}generation_tokens",
            "Generated tokens of text requests (as the responses' usage; aborted ones too).",
            [MODEL],
            registry=r,
        )
        self.request_success = Counter(
            f"{PREFIX}request_success",
            "Finished sequences (choices) by finish reason: stop, length, abort (client gone) or error.",
            [MODEL, "finished_reason"],
            registry=r,
        )
        # FlexServ's own.
        self.model_loads = Counter(
            f"{PREFIX}model_loads", "Model loads by result (success, failure).", [MODEL, "kind", "result"], registry=r
        )
        self.model_load_duration = Histogram(
            f"{PREFIX}model_load_duration_seconds",
            "Time a successful model load took.",
            [MODEL, "kind"],
            buckets=LOAD_BUCKETS,
            registry=r,
        )
        self.model_unloads = Counter(
            f"{PREFIX}model_unloads",
            "Models unloaded on request or at shutdown, by reason (manual, shutdown).",
            [MODEL, "kind", "reason"],
            registry=r,
        )
        self.model_evictions = Counter(
            f"{PREFIX}model_evictions",
            "Models evicted by the server, by reason (ttl, oom, failed: its engine died).",
            [MODEL, "kind", "reason"],
            registry=r,
        )
        self.http_requests = Counter(
            f"{PREFIX}http_requests",
            "HTTP requests by route template, method and status code.",
            ["route", "method", "status"],
            registry=r,
        )
        self.http_request_duration = Histogram(
            f"{PREFIX}http_request_duration_seconds",
            "Time from a request's arrival to the end of its response body, by route template and method.",
            ["route", "method"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )

    def register(self, collectors: Iterable[Collector]) -> None:
        """Add collectors (the core's own and the plugins')."""
        for collector in collectors:
            self.registry.register(collector)

    def observe_event(self, event: ModelEvent) -> None:
        """Count a model lifecycle event (the registry's event sink calls this)."""
        name, kind = event.model_id, str(event.kind)
        if event.type is ModelEventType.LOADED:
            self.model_loads.labels(name, kind, "success").inc()
            if event.seconds is not None:
                self.model_load_duration.labels(name, kind).observe(event.seconds)
        elif event.type is ModelEventType.FAILED:
            self.model_loads.labels(name, kind, "failure").inc()
        elif event.type is ModelEventType.UNLOADED:
            self.model_unloads.labels(name, kind, str(event.reason or "manual")).inc()
        elif event.type is ModelEventType.EVICTED:
            self.model_evictions.labels(name, kind, str(event.reason or "ttl")).inc()
