"""Hook implementations of the ``anomaly`` plugin."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from litestar.types import ControllerRouterHandler

from flexserv_anomaly import routes, stream_routes
from flexserv_anomaly.model import KIND, AnomalyStoreBackend
from flexserv_anomaly.service import service_for
from flexserv_anomaly.settings import AnomalySettings
from flexserv_core import (
    Backend,
    FlexServer,
    ModelSpec,
    RequestContext,
    Settings,
    hookimpl,
)

_FIELDS = {**routes.FIELDS, f"{routes.PREFIX}/stream": stream_routes.STREAM_FIELDS}


@hookimpl
def flexserv_add_settings() -> type[msgspec.Struct]:
    return AnomalySettings


@hookimpl
def flexserv_register_backends(settings: Settings) -> list[Backend]:
    return [AnomalyStoreBackend(settings)]


@hookimpl
def flexserv_register_routes(settings: Settings) -> list[ControllerRouterHandler]:
    return [*routes.ROUTES, *stream_routes.ROUTES]


@hookimpl
def flexserv_resolve_model(model_id: str, kind: str, server: FlexServer) -> ModelSpec | None:
    if kind != KIND:
        return None
    return routes.resolve(model_id)


@hookimpl
def flexserv_preprocess_request(endpoint: str, body: dict[str, Any], context: RequestContext) -> None:
    """Refuse fields the anomaly routes do not read (the source runtime's ``epochs``,
    ``polars_config``, ``training_file``...) instead of ignoring them."""
    routes.refuse_unread_fields(endpoint, body, _FIELDS.get(endpoint))


class _Collector:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        service = service_for(self.settings)
        counts = service.counts
        fitted = CounterMetricFamily(
            "flexserv:anomaly_rows_fitted", "Rows anomaly models were fitted on.", labels=["model"]
        )
        for name, n in counts.rows_fitted.items():
            fitted.add_metric([name], n)
        scored = CounterMetricFamily("flexserv:anomaly_rows_scored", "Rows scored by anomaly models.", labels=["model"])
        for name, n in counts.rows_scored.items():
            scored.add_metric([name], n)
        fits = CounterMetricFamily("flexserv:anomaly_fits", "Anomaly fits by outcome.", labels=["outcome"])
        for outcome, n in counts.fits.items():
            fits.add_metric([outcome], n)
        points = CounterMetricFamily("flexserv:anomaly_stream_points", "Points sent to streaming detectors.")
        points.add_metric([], counts.stream_points)
        streams = GaugeMetricFamily("flexserv:anomaly_stream_detectors", "Streaming detectors held now.")
        streams.add_metric([], len(service.streams.detectors))
        yield from (fitted, scored, fits, points, streams)


@hookimpl
def flexserv_metrics_collectors(settings: Settings) -> list[Any]:
    return [_Collector(settings)]


@hookimpl
def flexserv_startup(server: FlexServer) -> None:
    service_for(server.settings).attach(server)


@hookimpl
async def flexserv_shutdown(server: FlexServer) -> None:
    service = service_for(server.settings)
    await service.streams.close()
    service.pool.close()
