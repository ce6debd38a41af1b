"""Large score requests in row chunks on several threads: the same scores, bit for bit."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from flexserv_anomaly import fitted, model
from flexserv_anomaly.detectors import DETECTORS, check_params
from synthetic import blobs

from flexserv_core import ModelSpec


def _served(backend: str, x: np.ndarray, threads: int) -> model.AnomalyModel:
    spec = fitted.FitSpec(backend=backend, params=check_params(DETECTORS[backend], {}), contamination=0.05)
    source = ModelSpec(name="m", kind=model.KIND, source="anomaly:m", backend=model.BACKEND, origin="fitted")
    return model.AnomalyModel(source, fitted.fit(spec, x[:2000]), "sha256:x", threads=threads)


def test_chunks_only_for_large_requests_and_at_most_one_per_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model.os, "cpu_count", lambda: 4)
    assert model.chunk_count(model.PARALLEL_ROWS - 1, 8) == 1
    assert model.chunk_count(model.PARALLEL_ROWS, 1) == 1
    assert model.chunk_count(model.PARALLEL_ROWS, 2) == 2
    assert model.chunk_count(100_000, 8) == 4
    monkeypatch.setattr(model.os, "cpu_count", lambda: None)
    assert model.chunk_count(100_000, 8) == 1


@pytest.mark.parametrize("backend", ["isolation_forest", "local_outlier_factor", "one_class_svm", "robust_zscore"])
def test_chunked_scores_equal_one_call_bit_for_bit(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model.os, "cpu_count", lambda: 3)
    x, _ = blobs(n=9000, outliers=300, seed=41)  # 9,300 rows: above PARALLEL_ROWS, 3 uneven chunks
    served = _served(backend, x, threads=3)
    expected = served.fitted.raw_scores(x)
    assert np.array_equal(asyncio.run(served.raw_scores(x)), expected)
    assert served.fitted.detector.parallel_scoring == (backend != "robust_zscore")
