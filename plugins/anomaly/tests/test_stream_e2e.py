"""Streaming detection over HTTP: cold start, background refits, drift, the detector cap."""

from __future__ import annotations

import numpy as np
import pytest
from anomaly_client import Serve, error
from sklearn.metrics import roc_auc_score
from synthetic import sine_series

from flexserv_core.testing import wait_until


def _send(client, **body):
    response = client.post("/v1/anomaly/stream", json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.slow
def test_a_stream_starts_cold_refits_in_the_background_and_finds_the_spikes(serve: Serve) -> None:
    series, labels = sine_series(n=800, seed=3)
    points = [{"value": float(v), "delta": float(d)} for v, d in series]
    with serve() as client:
        first = _send(
            client,
            model="sensor",
            data=points[:30],
            backend="isolation_forest",
            min_samples=50,
            retrain_interval=100,
            window_size=400,
        )
        assert first["status"] == "collecting" and first["samples_until_ready"] == 20
        assert all(r["score"] is None and r["is_anomaly"] is None for r in first["results"])
        assert [r["samples_until_ready"] for r in first["results"]][-1] == 20
        second = _send(client, model="sensor", data=points[30:60])
        assert second["model_version"] == 1 and second["samples_until_ready"] == 0
        assert [r["score"] is None for r in second["results"]] == [True] * 19 + [False] * 11
        scores: list[float] = []
        statuses = set()
        for start in range(60, 800, 20):
            out = _send(client, model="sensor", data=points[start : start + 20])
            scores += [r["score"] for r in out["results"]]
            statuses.add(out["status"])
        assert statuses <= {"ready", "retraining"}
        assert "retraining" in statuses  # answers kept coming while a refit ran
        stats = client.get("/v1/anomaly/stream/sensor").json()
        assert stats["total_processed"] == 800 and stats["samples_collected"] == 400
        wait_until(lambda: client.get("/v1/anomaly/stream/sensor").json()["status"] == "ready", timeout=30)
        # A refit starts every 100 points unless one is still running (then the next waits for it).
        assert client.get("/v1/anomaly/stream/sensor").json()["model_version"] >= 2
        auc = roc_auc_score(labels[60:], scores)
        print("stream ROC AUC", auc)
        assert auc >= 0.85
        drift = client.get("/v1/anomaly/stream/sensor").json()["drift"]
        assert drift is None or drift["max_mean_shift_feature"] in ("value", "delta")
        listed = client.get("/v1/anomaly/stream/detectors").json()
        assert [d["model_id"] for d in listed["data"]] == ["sensor"]
        reset = client.post("/v1/anomaly/stream/sensor/reset").json()
        assert reset["status"] == "collecting" and reset["model_version"] == 0
        mismatch = error(
            client.post("/v1/anomaly/stream", json={"model": "sensor", "data": points[0], "window_size": 50}), 400
        )
        assert mismatch["code"] == "stream_config_mismatch" and mismatch["param"] == "window_size"
        assert client.delete("/v1/anomaly/stream/sensor").json()["deleted"] is True
        error(client.get("/v1/anomaly/stream/sensor"), 404)


@pytest.mark.slow
def test_drift_shows_a_level_shift(serve: Serve) -> None:
    rng = np.random.default_rng(0)
    with serve() as client:
        base = rng.normal(size=(60, 2)).tolist()
        _send(
            client,
            model="d",
            data=base,
            backend="isolation_forest",
            min_samples=50,
            retrain_interval=1000,
            window_size=1000,
        )
        shifted = (rng.normal(size=(40, 2)) + np.array([4.0, 0.0])).tolist()
        out = _send(client, model="d", data=shifted)
        assert out["drift"]["max_mean_shift_feature"] == 0 and out["drift"]["max_mean_shift"] > 2
        assert out["drift"]["anomaly_rate"] > 3 * out["drift"]["expected_anomaly_rate"]


@pytest.mark.slow
def test_the_number_of_stream_detectors_is_capped(serve: Serve) -> None:
    with serve(anomaly_max_stream_detectors=2) as client:
        for name in ("s1", "s2"):
            _send(client, model=name, data=[[1.0, 2.0]])
        capped = error(client.post("/v1/anomaly/stream", json={"model": "s3", "data": [[1.0, 2.0]]}), 429)
        assert capped["code"] == "too_many_stream_detectors" and "--anomaly-max-stream-detectors" in capped["message"]
        client.delete("/v1/anomaly/stream/s1")
        _send(client, model="s3", data=[[1.0, 2.0]])
        too_wide = error(client.post("/v1/anomaly/stream", json={"model": "s3", "data": [[1.0, 2.0, 3.0]]}), 400)
        assert too_wide["param"] == "data"
        client.delete("/v1/anomaly/stream/s2")
        window = error(
            client.post("/v1/anomaly/stream", json={"model": "s4", "data": [[1.0]], "window_size": 10**9}), 400
        )
        assert window["param"] == "window_size"


@pytest.mark.slow
def test_a_stream_window_is_bounded_in_values_not_only_in_points(serve: Serve) -> None:
    # 20,000 points (--anomaly-max-stream-window) of 1,024 features held 183 MiB per
    # detector, 64 detectors 11.7 GB: the window's values are bounded too
    with serve(anomaly_max_stream_values=1_000) as client:
        wide = [[0.0] * 10]
        over = error(client.post("/v1/anomaly/stream", json={"model": "w", "data": wide, "window_size": 101}), 400)
        assert over["param"] == "window_size" and over["code"] == "invalid_value"
        assert "--anomaly-max-stream-values" in over["message"]
        assert "at most 100" in over["message"]
        assert client.get("/v1/anomaly/stream/w").status_code == 404  # nothing was created
        _send(client, model="w", data=wide, window_size=100, min_samples=50)
        # the default window (1000) of a narrow stream fits
        _send(client, model="n", data=[[0.0]])
