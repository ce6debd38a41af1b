"""Bounded inputs, refused parameters, the fit time budget and a disconnect stopping a fit."""

from __future__ import annotations

import importlib.util
import json
import socket
import time
from urllib.parse import urlsplit

import numpy as np
import pytest
from anomaly_client import Serve, error, fit
from synthetic import blobs

from flexserv_core.testing import wait_until


@pytest.mark.slow
def test_rows_features_bytes_and_bad_values_are_bounded(serve: Serve) -> None:
    with serve(anomaly_max_rows=100, anomaly_max_features=4, max_request_bytes=64 * 1024) as client:
        too_many = error(client.post("/v1/anomaly/fit", json={"data": [[1.0]] * 101}), 413)
        assert too_many["code"] == "too_many_rows" and "--anomaly-max-rows" in too_many["message"]
        wide = error(client.post("/v1/anomaly/fit", json={"data": [[1.0] * 5] * 3}), 400)
        assert wide["code"] == "too_many_features" and "--anomaly-max-features" in wide["message"]
        big = error(client.post("/v1/anomaly/fit", json={"data": [[1.0]] * 2, "pad": "x" * 70_000}), 413)
        assert "--max-request-bytes" in big["message"]
        cases = {
            "ragged": [[1.0, 2.0], [1.0]],
            "string": [[1.0], ["a"]],
            "empty": [],
            "mixed": [[1.0], "text"],
        }
        for what, data in cases.items():
            body = error(client.post("/v1/anomaly/fit", json={"data": data}), 400)
            assert body["param"] == "data", what
        assert error(client.post("/v1/anomaly/fit", json={"data": [[1.0]]}), 400)["message"].startswith("A fit needs")


@pytest.mark.slow
def test_unknown_fields_parameters_and_backends_are_refused(serve: Serve) -> None:
    data = [[float(i)] for i in range(20)]
    with serve() as client:
        epochs = error(client.post("/v1/anomaly/fit", json={"data": data, "epochs": 100}), 400)
        assert epochs["param"] == "epochs" and epochs["code"] == "unsupported_parameter"
        param = error(client.post("/v1/anomaly/fit", json={"data": data, "parameters": {"n_trees": 5}}), 400)
        assert param["param"] == "parameters.n_trees" and "n_estimators" in param["message"]
        bad = error(client.post("/v1/anomaly/fit", json={"data": data, "parameters": {"n_estimators": 0}}), 400)
        assert bad["param"] == "parameters.n_estimators"
        unknown = error(client.post("/v1/anomaly/fit", json={"data": data, "backend": "autoencoder"}), 400)
        assert unknown["code"] == "unknown_backend"
        if importlib.util.find_spec("pyod") is None:  # the default install: the extra is optional
            for backend in ("ecod", "copod"):
                missing = error(client.post("/v1/anomaly/fit", json={"data": data, "backend": backend}), 400)
                assert missing["code"] == "backend_not_installed" and "flexserv-anomaly[pyod]" in missing["message"]
        contamination = error(client.post("/v1/anomaly/fit", json={"data": data, "contamination": 0.0}), 400)
        assert contamination["param"] == "contamination"
        schema = error(
            client.post("/v1/anomaly/fit", json={"data": [{"a": 1}, {"a": 2}], "schema": {"a": "hash"}}), 400
        )
        assert schema["param"] == "schema.a"
        fit(client, model="m", data=data)
        explain = error(client.post("/v1/anomaly/score", json={"model": "m", "data": data, "explain": True}), 400)
        assert explain["param"] == "explain"
        other = error(client.post("/v1/anomaly/score", json={"model": "m", "data": data, "backend": "lof"}), 400)
        assert other["code"] == "backend_mismatch"
        exists = error(client.post("/v1/anomaly/fit", json={"model": "m", "data": data, "overwrite": False}), 400)
        assert exists["code"] == "model_exists"


@pytest.mark.slow
def test_a_fit_past_its_time_budget_is_stopped(serve: Serve) -> None:
    # One-Class SVM with nu=0.5 keeps half the rows as support vectors: ~6 s on an idle
    # 2-core machine, far past the 1 s budget on any machine (tol alone was ~1.4 s idle)
    x = np.random.default_rng(0).normal(size=(12000, 20)).tolist()
    with serve(anomaly_fit_timeout=1.0) as client:
        fit(client, model="warm", data=x[:50])  # the worker process is up
        started = time.monotonic()
        body = {"model": "slow", "backend": "one_class_svm", "data": x, "parameters": {"nu": 0.5, "tol": 1e-9}}
        stopped = error(client.post("/v1/anomaly/fit", json=body), 504)
        assert stopped["code"] == "fit_timeout" and "--anomaly-fit-timeout" in stopped["message"]
        assert time.monotonic() - started < 60
        assert client.get("/v1/anomaly/models/slow").status_code == 404
        metrics = client.get("/metrics").text
        assert 'flexserv:anomaly_fits_total{outcome="timeout"} 1.0' in metrics
        fit(client, model="after", data=x[:50])  # a fresh worker takes over


def test_a_fit_that_fails_on_the_server_side_is_a_503_counted_as_failed(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flexserv_anomaly import codec

    def out_of_memory(*args: object, **kwargs: object) -> codec.Archive:
        raise MemoryError

    x = np.random.default_rng(2).normal(size=(60, 4)).tolist()
    with serve() as client:
        fit(client, model="warm", data=x)
        with monkeypatch.context() as patched:
            patched.setattr(codec, "Archive", out_of_memory)  # this process's side only, not the worker's
            failed = error(client.post("/v1/anomaly/fit", json={"model": "m", "data": x}), 503)
        assert failed["code"] == "fit_failed" and "MemoryError" in failed["message"]
        assert client.get("/v1/anomaly/models/m").status_code == 404
        metrics = client.get("/metrics").text
        assert 'flexserv:anomaly_fits_total{outcome="failed"} 1.0' in metrics
        assert 'outcome="cancelled"' not in metrics
        fit(client, model="m", data=x)  # a fresh worker takes over


@pytest.mark.slow
def test_a_client_that_disconnects_stops_its_fit(serve: Serve) -> None:
    x = np.random.default_rng(1).normal(size=(12000, 20)).tolist()
    with serve() as client:
        fit(client, model="warm", data=x[:50])
        url = urlsplit(str(client.base_url))
        payload = json.dumps(
            {"model": "gone", "backend": "one_class_svm", "data": x, "parameters": {"nu": 0.5, "tol": 1e-9}}
        ).encode()
        with socket.create_connection((url.hostname, url.port)) as sock:
            head = (
                f"POST /v1/anomaly/fit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n"
            ).encode()
            sock.sendall(head + payload)
            time.sleep(1.0)  # the behaviour under test: the fit is running when the client leaves
        wait_until(
            lambda: 'outcome="cancelled"' in client.get("/metrics").text, timeout=30, message="the fit was cancelled"
        )
        assert client.get("/v1/anomaly/models/gone").status_code == 404
        assert client.post("/v1/anomaly/fit", json={"model": "after", "data": x[:50]}).status_code == 200


@pytest.mark.slow
def test_metrics_count_rows_fitted_and_scored(serve: Serve) -> None:
    train, _ = blobs(n=100, outliers=5, seed=9)
    with serve() as client:
        fit(client, model="counted", data=train.tolist())
        client.post("/v1/anomaly/score", json={"model": "counted", "data": train[:7].tolist()})
        text = client.get("/metrics").text
        assert 'flexserv:anomaly_rows_fitted_total{model="counted"} 105.0' in text
        assert 'flexserv:anomaly_rows_scored_total{model="counted"} 7.0' in text
        loaded = client.get("/v1/flexserv/models/loaded").json()
        assert any(m.get("model_id") == "counted" for m in (loaded.get("data") or loaded.get("models") or []))
        assert client.post("/v1/flexserv/models/unload", json={"model_id": "counted"}).status_code == 200
        assert (
            client.post("/v1/anomaly/score", json={"model": "counted", "data": train[:2].tolist()}).status_code == 200
        )


@pytest.mark.slow
def test_an_idle_model_expires_and_loads_again_from_the_store(serve: Serve) -> None:
    train, _ = blobs(n=100, outliers=5, seed=11)
    probe = {"model": "idle", "data": train[:4].tolist()}
    with serve(model_timeout=1) as client:
        fit(client, model="idle", data=train.tolist())
        first = client.post("/v1/anomaly/score", json=probe).json()["data"]
        assert client.get("/v1/anomaly/models/idle").json()["state"] == "ready"
        wait_until(
            lambda: client.get("/v1/anomaly/models/idle").json()["state"] == "unloaded",
            timeout=30,
            message="the TTL unloaded the idle model",
        )
        assert client.post("/v1/anomaly/score", json=probe).json()["data"] == first  # reloaded, refitted, equal
