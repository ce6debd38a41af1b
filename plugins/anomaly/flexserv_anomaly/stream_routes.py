"""``/v1/anomaly/stream``: streaming detectors (the source runtime's routes and fields)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import msgspec
from litestar import Request, delete, get, post

from flexserv_anomaly import detectors, inputs
from flexserv_anomaly.routes import PREFIX, model_name, path_param, server_of
from flexserv_anomaly.service import service_for
from flexserv_anomaly.settings import AnomalySettings
from flexserv_anomaly.streaming import StreamConfig, StreamDetector
from flexserv_core import InvalidRequest, NotFound, TooManyRequests, open_request_context, parse_body


class StreamRequest(msgspec.Struct, kw_only=True):
    model: str = "default-stream"
    data: dict[str, Any] | list[Any]
    backend: str | None = None
    parameters: dict[str, Any] | None = None
    min_samples: Annotated[int, msgspec.Meta(ge=10)] | None = None
    retrain_interval: Annotated[int, msgspec.Meta(ge=10)] | None = None
    window_size: Annotated[int, msgspec.Meta(ge=50)] | None = None
    contamination: Annotated[float, msgspec.Meta(gt=0, le=0.5)] | None = None
    threshold: float | None = None


STREAM_FIELDS = frozenset(StreamRequest.__struct_fields__)
DEFAULT_MIN_SAMPLES, DEFAULT_RETRAIN_INTERVAL, DEFAULT_WINDOW, DEFAULT_CONTAMINATION = 50, 100, 1000, 0.1


def default_backend() -> str:
    """``ecod`` as in the source runtime when PyOD is installed, else ``isolation_forest``."""
    return "ecod" if detectors.DETECTORS["ecod"].available() else "isolation_forest"


def _config(body: StreamRequest, rows: inputs.Rows, limits: AnomalySettings) -> StreamConfig:
    try:
        info = detectors.lookup(body.backend or default_backend())
        params = detectors.check_params(info, body.parameters or {})
    except detectors.DetectorError as exc:
        raise InvalidRequest(str(exc), param=exc.param, code=exc.code) from None
    window = body.window_size or DEFAULT_WINDOW
    limit = limits.anomaly_max_stream_window
    if window > limit:
        raise InvalidRequest(
            f"'window_size' {window} is above this server's limit of {limit} (--anomaly-max-stream-window).",
            param="window_size",
        )
    assert rows.matrix is not None
    _check_values(window, rows.matrix.shape[1], limits.anomaly_max_stream_values)
    min_samples = body.min_samples or DEFAULT_MIN_SAMPLES
    if min_samples > window:
        raise InvalidRequest(
            f"'min_samples' ({min_samples}) must not exceed 'window_size' ({window}).", param="min_samples"
        )
    return StreamConfig(
        backend=info.name,
        params=params,
        contamination=body.contamination or DEFAULT_CONTAMINATION,
        min_samples=min_samples,
        retrain_interval=body.retrain_interval or DEFAULT_RETRAIN_INTERVAL,
        window_size=window,
        threshold=body.threshold,
        width=rows.matrix.shape[1],
        features=rows.features,
    )


def _check_values(window: int, width: int, limit: int) -> None:
    """The window is kept for the detector's life: bound its values, not only its points."""
    if window * width > limit:
        raise InvalidRequest(
            f"A window of {window} points of {width} features holds {window * width} values; this server keeps at"
            f" most {limit} per stream (--anomaly-max-stream-values): ask for a 'window_size' of at most"
            f" {limit // width}.",
            param="window_size",
            code="invalid_value",
        )


def _check_same(detector: StreamDetector, body: StreamRequest) -> None:
    """A setting sent to an existing detector must be the one it was created with."""
    c = detector.config
    given = {
        "backend": detectors.lookup(body.backend).name if body.backend else None,
        "min_samples": body.min_samples,
        "retrain_interval": body.retrain_interval,
        "window_size": body.window_size,
        "contamination": body.contamination,
    }
    for key, value in given.items():
        if value is not None and value != getattr(c, key):
            raise InvalidRequest(
                f"The stream detector '{detector.model_id}' has {key}={getattr(c, key)!r}; "
                f"reset or delete it to change it.",
                param=key,
                code="stream_config_mismatch",
            )


@post(
    f"{PREFIX}/stream",
    status_code=200,
    summary="Score points of a stream",
    opt={"body": StreamRequest, "scope": "inference"},
)
async def stream(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    service = service_for(server.settings)
    body = await parse_body(request, StreamRequest, open_request_context(request, f"{PREFIX}/stream"))
    model_id = model_name(body.model)
    if body.threshold is not None and not math.isfinite(body.threshold):
        raise InvalidRequest("'threshold' must be a finite number.", param="threshold")
    data = [body.data] if isinstance(body.data, dict) else body.data
    detector = service.streams.get(model_id)
    features = detector.config.features if detector else None
    rows = inputs.parse(data, service.limits, features=features, unnamed=detector is not None and features is None)
    if rows.texts is not None:
        raise InvalidRequest("Streams take numeric points (objects or lists of numbers).", param="data")
    assert rows.matrix is not None
    if detector is None:
        if service.streams.full():
            raise TooManyRequests(
                f"This server holds {service.limits.anomaly_max_stream_detectors} stream detectors, its limit "
                "(--anomaly-max-stream-detectors); delete one first.",
                param="model",
                code="too_many_stream_detectors",
            )
        detector = service.streams.create(model_id, _config(body, rows, service.limits))
    else:
        try:
            _check_same(detector, body)
        except detectors.DetectorError as exc:
            raise InvalidRequest(str(exc), param=exc.param, code=exc.code) from None
        if rows.matrix.shape[1] != detector.config.width:
            raise InvalidRequest(
                f"Points have {rows.matrix.shape[1]} features; this stream's have {detector.config.width}.",
                param="data",
            )
    results = await detector.process(rows.matrix, body.threshold)
    service.counts.stream_points += len(results)
    return {
        "object": "streaming_result",
        "model": model_id,
        "backend": detector.config.backend,
        "status": detector.status,
        "results": [
            {
                "index": r.index,
                "score": r.score,
                "is_anomaly": r.is_anomaly,
                "raw_score": r.raw_score,
                "samples_until_ready": r.samples_until_ready,
            }
            for r in results
        ],
        "model_version": detector.model_version,
        "samples_collected": len(detector.window),
        "samples_until_ready": detector.samples_until_ready(),
        "threshold": detector.threshold(body.threshold),
        "drift": detector.drift(),
    }


@get(f"{PREFIX}/stream/detectors", summary="Streaming detectors and their statistics", opt={"scope": "inference"})
async def list_streams(request: Request[Any, Any, Any]) -> dict[str, Any]:
    streams = service_for(server_of(request).settings).streams
    data = [d.stats() for d in streams.detectors.values()]
    return {"object": "list", "data": data, "total": len(data)}


def _detector(request: Request[Any, Any, Any], model_id: str) -> StreamDetector:
    detector = service_for(server_of(request).settings).streams.get(model_name(model_id, "model_id"))
    if detector is None:
        raise NotFound(f"No stream detector '{model_id}'.", param="model_id", code="stream_not_found")
    return detector


@get(f"{PREFIX}/stream/{{model_id:str}}", summary="One streaming detector", opt={"scope": "inference"})
async def get_stream(request: Request[Any, Any, Any]) -> dict[str, Any]:
    model_id = path_param(request, "model_id")
    return _detector(request, model_id).stats()


@delete(
    f"{PREFIX}/stream/{{model_id:str}}",
    status_code=200,
    summary="Delete a streaming detector",
    opt={"scope": "inference"},
)
async def delete_stream(request: Request[Any, Any, Any]) -> dict[str, Any]:
    model_id = path_param(request, "model_id")
    _detector(request, model_id)
    await service_for(server_of(request).settings).streams.delete(model_id)
    return {"object": "delete_result", "model_id": model_id, "deleted": True}


@post(
    f"{PREFIX}/stream/{{model_id:str}}/reset", status_code=200, summary="Back to cold start", opt={"scope": "inference"}
)
async def reset_stream(request: Request[Any, Any, Any]) -> dict[str, Any]:
    model_id = path_param(request, "model_id")
    old = _detector(request, model_id)
    streams = service_for(server_of(request).settings).streams
    await streams.delete(model_id)
    fresh = streams.create(model_id, old.config)
    return {"object": "reset_result", "model_id": model_id, "reset": True, **fresh.stats()}


ROUTES = [stream, list_streams, get_stream, delete_stream, reset_stream]
