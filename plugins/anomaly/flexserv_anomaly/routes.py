"""``/v1/anomaly/``: fit, score, detect, load, models, backends (the source runtime's shapes)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated, Any, TypeVar

import msgspec
import numpy as np
from litestar import Request, delete, get, post

from flexserv_anomaly import detectors, inputs, text
from flexserv_anomaly.fitted import NORMALIZATIONS, FitSpec, Normalization, ScalerType
from flexserv_anomaly.model import KIND, SOURCE_PREFIX, AnomalyModel
from flexserv_anomaly.service import AnomalyService, service_for
from flexserv_anomaly.store import BadName, check_name, parse_registry_name, registry_name
from flexserv_anomaly.worker import FitFailed, FitTimedOut
from flexserv_core import (
    FlexServer,
    GatewayTimeout,
    InvalidRequest,
    ModelLoadError,
    ModelNotFound,
    ModelSpec,
    ServiceUnavailable,
    UnsupportedParameter,
    decode_json_object,
    open_request_context,
    parse_body,
    parse_fields,
    read_body,
    request_owner,
    until_disconnect,
)

log = logging.getLogger(__name__)
PREFIX = "/v1/anomaly"


class FitRequest(msgspec.Struct, kw_only=True):
    model: str = "default"
    backend: str = "isolation_forest"
    data: list[Any] | inputs.NpyData
    schema: dict[str, str] | None = None
    contamination: Annotated[float, msgspec.Meta(gt=0, le=0.5)] = 0.1
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    normalization: Normalization = "standardization"
    scaler_type: ScalerType = "robust"
    overwrite: bool = True
    embedding_model: str | None = None


class ScoreRequest(msgspec.Struct, kw_only=True):
    model: str = "default"
    backend: str | None = None
    data: list[Any] | inputs.NpyData
    schema: dict[str, str] | None = None
    threshold: float | None = None
    normalization: Normalization = "standardization"
    explain: bool = False


class LoadRequest(msgspec.Struct, kw_only=True):
    model: str = "default"
    backend: str | None = None


#: Fields each route reads; anything else in a body is refused (the preprocess hook).
FIELDS: dict[str, frozenset[str]] = {
    f"{PREFIX}/fit": frozenset(FitRequest.__struct_fields__),
    f"{PREFIX}/score": frozenset(ScoreRequest.__struct_fields__),
    f"{PREFIX}/detect": frozenset(ScoreRequest.__struct_fields__),
    f"{PREFIX}/load": frozenset(LoadRequest.__struct_fields__),
}


def server_of(request: Request[Any, Any, Any]) -> FlexServer:
    server: FlexServer = request.app.state.flexserv
    return server


def path_param(request: Request[Any, Any, Any], key: str) -> str:
    # read from the request: Litestar deprecates inferred path arguments, and FromPath is newer than our minimum
    return str(request.path_params[key])


def model_name(name: str, param: str = "model") -> str:
    try:
        return check_name(name)
    except BadName as exc:
        raise InvalidRequest(str(exc), param=param, code="invalid_model_name") from None


def _detector_error(exc: detectors.DetectorError) -> InvalidRequest:
    return InvalidRequest(str(exc), param=exc.param, code=exc.code)


#: A body that is the rows as one NPY file (the other fields in :data:`ARGUMENTS_HEADER`).
NPY_MEDIA_TYPE = "application/x-npy"
#: The header that carries a JSON object of the request's fields other than ``data``
#: when the body is an NPY file.
ARGUMENTS_HEADER = "X-FlexServ-Arguments"
BodyT = TypeVar("BodyT", FitRequest, ScoreRequest)


def refuse_unread_fields(endpoint: str, body: dict[str, Any], known: frozenset[str] | None) -> None:
    """Refuse fields the anomaly routes do not read (the source runtime's ``epochs``,
    ``polars_config``, ``training_file``...) instead of ignoring them."""
    if known is None:
        return
    for key in body:
        if key not in known:
            raise UnsupportedParameter(
                f"'{key}' is not implemented by this server's {endpoint} (it reads: {', '.join(sorted(known))}).",
                param=key,
            )


async def _read(
    request: Request[Any, Any, Any], schema: type[BodyT], endpoint: str
) -> tuple[BodyT, list[Any] | inputs.NpyData | bytes]:
    """The request's fields and its rows: from a JSON body, or, with ``Content-Type:
    application/x-npy``, the rows as the body's NPY file and the other fields from the
    :data:`ARGUMENTS_HEADER` JSON object (checked as the JSON body's are)."""
    media_type, _ = request.content_type
    if media_type != NPY_MEDIA_TYPE:
        body = await parse_body(request, schema, open_request_context(request, endpoint))
        return body, body.data
    raw = await read_body(request, param="data")
    if not raw:
        raise InvalidRequest("The request body is empty; send the rows as an NPY file.", param="data")
    sent = request.headers.getall(ARGUMENTS_HEADER, [])
    if len(sent) > 1:
        raise InvalidRequest(f"Send one {ARGUMENTS_HEADER} header, not {len(sent)}.", param=ARGUMENTS_HEADER)
    text = sent[0] if sent else "{}"
    if not text.isascii():
        # Header bytes arrive as Latin-1: UTF-8 text would be read as other characters.
        raise InvalidRequest(
            f"The {ARGUMENTS_HEADER} header must be ASCII: escape other characters as \\uXXXX in its JSON.",
            param=ARGUMENTS_HEADER,
        )
    fields = decode_json_object(
        text,
        server_of(request).settings.core.max_json_depth,
        what=f"The {ARGUMENTS_HEADER} header",
        param=ARGUMENTS_HEADER,
    )
    if "data" in fields:
        raise InvalidRequest(
            f"'data' cannot be in the {ARGUMENTS_HEADER} header: the rows are the request body.", param="data"
        )
    # Plugins' preprocess hooks (this one's refuses fields the route does not read) and the
    # schema see the fields as in a JSON body; an empty list stands in for the rows, which
    # the route reads from the body (inputs.read_npy).
    fields["data"] = []
    body = await parse_fields(fields, schema, open_request_context(request, endpoint))
    return body, raw


async def _rows(
    request: Request[Any, Any, Any],
    server: FlexServer,
    data: list[Any] | inputs.NpyData | bytes,
    *,
    features: list[str] | None,
    embedding_model: str | None,
    text_expected: bool | None,
    unnamed: bool = False,
) -> tuple[np.ndarray, inputs.Rows]:
    service = service_for(server.settings)
    if isinstance(data, bytes):
        rows = inputs.read_npy(data, service.limits, features=features, what="The NPY body")
    elif isinstance(data, inputs.NpyData):
        rows = inputs.parse_npy(data.npy, service.limits, features=features)
    else:
        rows = inputs.parse(data, service.limits, features=features, unnamed=unnamed)
    if text_expected is not None and (rows.texts is not None) != text_expected:
        wanted = "texts" if text_expected else "numeric rows"
        raise InvalidRequest(f"This model was fitted on {wanted}; send {wanted}.", param="data", code="invalid_data")
    if rows.texts is None:
        assert rows.matrix is not None
        return rows.matrix, rows
    assert embedding_model is not None
    return await until_disconnect(request, text.embed(server, embedding_model, rows.texts)), rows


@post(
    f"{PREFIX}/fit",
    status_code=200,
    summary="Fit an anomaly detector and store it",
    opt={"body": FitRequest, "scope": "inference"},
)
async def fit(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    service = service_for(server.settings)
    store = service.store  # without a state store (-p no:state) a 503 before any work
    body, data = await _read(request, FitRequest, f"{PREFIX}/fit")
    name = model_name(body.model)
    try:
        info = detectors.lookup(body.backend)
        params = detectors.check_params(info, body.parameters)
    except detectors.DetectorError as exc:
        raise _detector_error(exc) from None
    features = inputs.check_schema(body.schema)
    owner = request_owner(request)
    if not body.overwrite and await store.exists(name, owner=owner):
        raise _exists(name)
    is_text = isinstance(data, list) and bool(data) and isinstance(data[0], str)
    embedding = text.embedding_model_name(server, body.embedding_model) if is_text else None
    if body.embedding_model is not None and not is_text:
        raise InvalidRequest("'embedding_model' applies to text data only.", param="embedding_model")
    matrix, rows = await _rows(request, server, data, features=features, embedding_model=embedding, text_expected=None)
    if len(matrix) < 2:
        raise InvalidRequest("A fit needs at least 2 rows (10 or more are advised).", param="data", code="invalid_data")
    spec = FitSpec(
        backend=info.name,
        params=params,
        contamination=body.contamination,
        scaler=body.scaler_type,
        # list or NPY rows carry no names: the schema's, when given, name their columns
        features=rows.features if rows.features is not None or rows.texts is not None else features,
        input_type="text" if rows.texts is not None else "numeric",
        embedding_model=embedding,
        schema=body.schema,
    )
    budget = service.limits.anomaly_fit_timeout
    try:
        outcome, fresh = await until_disconnect(request, service.pool.fit(spec, matrix, name, budget=budget))
    except FitTimedOut as exc:
        service.counts.fits["timeout"] += 1
        raise GatewayTimeout(
            f"Fitting '{name}' was stopped: {exc} (--anomaly-fit-timeout).", param="data", code="fit_timeout"
        ) from None
    except FitFailed as exc:
        service.counts.fits["invalid" if exc.client_error else "failed"] += 1
        if exc.client_error:
            raise InvalidRequest(str(exc), param=exc.param, code=exc.code) from None
        raise ServiceUnavailable(f"Fitting '{name}' failed: {exc}", code=exc.code) from None
    except BaseException:
        service.counts.fits["cancelled"] += 1
        raise
    try:
        # the check above spares a fit its work; this one holds when fits of one name race
        await store.put(name, outcome.header, outcome.blob, owner=owner, replace=body.overwrite)
    except KeyError:
        raise _exists(name) from None
    key = registry_name(name, owner)
    service.remember(key, outcome.header["checksum"], fresh)
    await server.registry.unload(key)  # the next request loads the new model; running ones finish on the old
    service.counts.fits["ok"] += 1
    service.counts.rows_fitted[name] += len(matrix)
    log.info(
        "fitted anomaly model '%s' (%s) on %d rows in %.0f ms", name, info.name, len(matrix), outcome.training_time_ms
    )
    stats = outcome.stats
    threshold = stats.threshold(body.normalization)
    return {
        "object": "fit_result",
        "id": name,
        "model": name,
        "backend": info.name,
        "samples_fitted": len(matrix),
        "training_time_ms": round(outcome.training_time_ms, 3),
        "model_params": {
            "backend": info.name,
            "contamination": body.contamination,
            "threshold": threshold,
            "normalization": body.normalization,
            "input_dim": outcome.n_features,
            "parameters": params,
            "scaler_type": body.scaler_type,
        },
        "encoder": {"schema": body.schema, "features": spec.features} if spec.features else None,
        "input_type": spec.input_type,
        "embedding_model": embedding,
        "training_stats": stats.as_dict(),
        "checksum": outcome.header["checksum"],
        "status": "fitted",
    }


def _exists(name: str) -> InvalidRequest:
    return InvalidRequest(
        f"The anomaly model '{name}' exists and 'overwrite' is false.", param="overwrite", code="model_exists"
    )


async def _score(
    request: Request[Any, Any, Any], endpoint: str
) -> tuple[dict[str, Any], np.ndarray, np.ndarray, float]:
    server = server_of(request)
    service = service_for(server.settings)
    body, data = await _read(request, ScoreRequest, endpoint)
    name = model_name(body.model)
    if body.explain:
        raise InvalidRequest(
            "'explain' is not implemented by this server.", param="explain", code="unsupported_parameter"
        )
    if body.threshold is not None and not math.isfinite(body.threshold):
        raise InvalidRequest("'threshold' must be a finite number.", param="threshold")
    owner = request_owner(request)
    async with _stored_model(server, service, name, owner) as loaded:
        model = loaded.fitted
        if body.backend is not None:
            try:
                wanted = detectors.lookup(body.backend).name
            except detectors.DetectorError as exc:
                raise _detector_error(exc) from None
            if wanted != model.spec.backend:
                raise InvalidRequest(
                    f"The anomaly model '{name}' was fitted with {model.spec.backend}, not {wanted}.",
                    param="backend",
                    code="backend_mismatch",
                )
        if body.schema is not None and inputs.check_schema(body.schema) != model.spec.features:
            if model.spec.features is None:
                fitted_on = "texts" if model.spec.input_type == "text" else "unnamed columns: list rows or an NPY file"
                message = (
                    f"The model '{name}' has no named features (it was fitted on {fitted_on}): leave 'schema' out."
                )
            else:
                message = (
                    f"'schema' does not match the features the model '{name}' was fitted on ({model.spec.features})."
                )
            raise InvalidRequest(message, param="schema")
        matrix, _ = await _rows(
            request,
            server,
            data,
            features=model.spec.features,
            embedding_model=model.spec.embedding_model,
            text_expected=model.spec.input_type == "text",
            unnamed=model.spec.input_type == "numeric" and model.spec.features is None,
        )
        if matrix.shape[1] != model.n_features:
            raise InvalidRequest(
                f"Rows have {matrix.shape[1]} features; the model '{name}' was fitted on {model.n_features}.",
                param="data",
                code="invalid_data",
            )
        raw = await until_disconnect(request, loaded.raw_scores(matrix))
        backend = model.spec.backend
        scores = model.stats.normalise(raw, body.normalization)
        threshold = body.threshold if body.threshold is not None else model.stats.threshold(body.normalization)
    service.counts.rows_scored[name] += len(matrix)
    head = {"model": name, "backend": backend, "normalization": body.normalization}
    return head, raw, scores, threshold


class ScoredRow(msgspec.Struct):
    """One row of a score answer. A struct, not a dict: the same JSON object, and 10,000 of
    them are built and encoded in ~1.8 ms where dicts took ~2.6 ms."""

    index: int
    score: float
    is_anomaly: bool
    raw_score: float


class DetectedRow(msgspec.Struct):
    """One row of a detect answer (as :class:`ScoredRow`)."""

    index: int
    score: float
    raw_score: float


def _as_list(values: np.ndarray) -> list[float]:
    out: list[float] = values.tolist()
    return out


@post(
    f"{PREFIX}/score",
    status_code=200,
    summary="Score rows against a fitted model",
    opt={"body": ScoreRequest, "scope": "inference"},
)
async def score(request: Request[Any, Any, Any]) -> dict[str, Any]:
    head, raw, scores, threshold = await _score(request, f"{PREFIX}/score")
    flags = scores >= threshold
    data = list(map(ScoredRow, range(len(scores)), _as_list(scores), flags.tolist(), _as_list(raw)))
    count = int(flags.sum())
    return {
        "object": "list",
        "data": data,
        "total_count": len(data),
        **head,
        "summary": {
            "total_points": len(data),
            "anomaly_count": count,
            "anomaly_rate": count / len(data),
            "threshold": threshold,
        },
    }


@post(
    f"{PREFIX}/detect",
    status_code=200,
    summary="The anomalous rows only",
    opt={"body": ScoreRequest, "scope": "inference"},
)
async def detect(request: Request[Any, Any, Any]) -> dict[str, Any]:
    head, raw, scores, threshold = await _score(request, f"{PREFIX}/detect")
    hits = np.flatnonzero(scores >= threshold)
    data = list(map(DetectedRow, hits.tolist(), _as_list(scores[hits]), _as_list(raw[hits])))
    return {
        "object": "list",
        "data": data,
        "total_count": len(data),
        **head,
        "summary": {
            "total_points": len(scores),
            "anomalies_detected": len(data),
            "anomaly_rate": len(data) / len(scores),
            "threshold": threshold,
        },
    }


async def _require_stored(service: AnomalyService, name: str, owner: str | None) -> str:
    """The stored model's checksum; a 404 when it is not stored."""
    record = await service.store.record(name, owner=owner)
    if record is None:
        raise ModelNotFound(f"No anomaly model '{name}' is stored; fit it first (POST {PREFIX}/fit).", param="model")
    return str(record.payload.get("checksum"))


@asynccontextmanager
async def _stored_model(
    server: FlexServer, service: AnomalyService, name: str, owner: str | None
) -> AsyncIterator[AnomalyModel]:
    """The stored model ``name``, loaded on first use and leased while it is used: a
    404 when it is not stored, also when a delete wins the race with its load."""
    checksum = await _require_stored(service, name, owner)
    loaded = server.registry.model_if_loaded(registry_name(name, owner))
    if isinstance(loaded, AnomalyModel) and loaded.checksum != checksum:
        # refitted through another server on the same store (a replica): this copy is stale
        await server.registry.unload(registry_name(name, owner))
    async with AsyncExitStack() as stack:
        try:
            lease = await stack.enter_async_context(server.registry.acquire(registry_name(name, owner), AnomalyModel))
        except ModelLoadError:
            await _require_stored(service, name, owner)
            raise
        yield lease.model


def resolve(model_id: str) -> ModelSpec | None:
    """The registry's spec of a model name (``name`` or ``name@owner``); the routes
    check that it is stored before they ask the registry for it."""
    if parse_registry_name(model_id) is None:
        return None
    return ModelSpec(
        name=model_id, kind=KIND, source=f"{SOURCE_PREFIX}{model_id}", backend="anomaly-store", origin="fitted"
    )


@post(
    f"{PREFIX}/load",
    status_code=200,
    summary="Load a stored model now",
    opt={"body": LoadRequest, "scope": "inference"},
)
async def load(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    service = service_for(server.settings)
    body = await parse_body(request, LoadRequest, open_request_context(request, f"{PREFIX}/load"))
    name = model_name(body.model)
    owner = request_owner(request)
    async with _stored_model(server, service, name, owner) as loaded:
        model = loaded.fitted
    return {
        "object": "load_result",
        "model": name,
        "backend": model.spec.backend,
        "filename": name,
        "is_fitted": True,
        "threshold": model.stats.threshold("standardization"),
        "encoder_loaded": model.spec.features is not None,
        "encoder_schema": model.spec.schema,
        "status": "loaded",
    }


def _summary(entry: dict[str, Any], server: FlexServer, owner: str | None) -> dict[str, Any]:
    header = entry.get("header") or {}
    thresholds = header.get("thresholds") or {}
    return {
        "id": entry["name"],
        "object": "anomaly_model",
        "model": entry["name"],
        "filename": entry["name"],
        "backend": header.get("backend"),
        "size_bytes": entry["size_bytes"],
        "modified": entry["modified"],
        "samples": header.get("samples"),
        "n_features": header.get("n_features"),
        "features": header.get("features"),
        "contamination": header.get("contamination"),
        "threshold": thresholds.get("standardization"),
        "input_type": header.get("input_type"),
        "embedding_model": header.get("embedding_model"),
        "format_version": header.get("format_version"),
        "state": server.registry.state_of(registry_name(entry["name"], owner)).value,
        "error": entry.get("error"),
    }


@get(f"{PREFIX}/models", summary="Stored anomaly models", opt={"scope": "inference"})
async def list_models(request: Request[Any, Any, Any]) -> dict[str, Any]:
    server = server_of(request)
    owner = request_owner(request)
    entries = await service_for(server.settings).store.list(owner=owner)
    data = [_summary(e, server, owner) for e in entries]
    return {"object": "list", "data": data, "total": len(data)}


@get(f"{PREFIX}/models/{{name:str}}", summary="One stored anomaly model", opt={"scope": "inference"})
async def get_model(request: Request[Any, Any, Any]) -> dict[str, Any]:
    name = path_param(request, "name")
    server = server_of(request)
    model_name(name, "name")
    owner = request_owner(request)
    stored = await service_for(server.settings).store.record(name, owner=owner)
    if stored is not None:
        entry = {
            "name": name,
            "size_bytes": stored.blob_size or 0,
            "modified": stored.created_at,
            "header": stored.payload,
        }
        return _summary(entry, server, owner)
    raise ModelNotFound(f"No anomaly model '{name}' is stored.", param="name")


@delete(
    f"{PREFIX}/models/{{name:str}}",
    status_code=200,
    summary="Delete a stored anomaly model",
    opt={"scope": "inference"},
)
async def delete_model(request: Request[Any, Any, Any]) -> dict[str, Any]:
    name = path_param(request, "name")
    server = server_of(request)
    service = service_for(server.settings)
    model_name(name, "name")
    owner = request_owner(request)
    if not await service.store.delete(name, owner=owner):
        raise ModelNotFound(f"No anomaly model '{name}' is stored.", param="name")
    key = registry_name(name, owner)
    service.forget(key)
    await server.registry.unload(key)
    return {"object": "delete_result", "filename": name, "model": name, "deleted": True}


@get(f"{PREFIX}/backends", summary="Anomaly detectors and whether they are installed", opt={"scope": "inference"})
async def backends() -> dict[str, Any]:
    data = [info.describe() for info in detectors.DETECTORS.values()]
    return {
        "object": "list",
        "data": data,
        "total": len(data),
        "categories": sorted({d["category"] for d in data}),
        "normalizations": list(NORMALIZATIONS),
        "timestamp": int(time.time()),
    }


ROUTES = [fit, score, detect, load, list_models, get_model, delete_model, backends]
