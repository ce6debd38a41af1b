"""The fit pool answers with the encoded model first and hands the fitted object over after."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from flexserv_anomaly import codec, fitted, worker
from flexserv_anomaly.detectors import DETECTORS, check_params
from synthetic import blobs


def test_the_fitted_model_follows_the_answer_and_scores_like_its_stored_form() -> None:
    x, _ = blobs(n=300, outliers=15, seed=31)
    spec = fitted.FitSpec(
        backend="isolation_forest", params=check_params(DETECTORS["isolation_forest"], {}), contamination=0.05
    )

    async def run() -> tuple[worker.FitOutcome, fitted.FittedModel | None, int]:
        pool = worker.FitPool(1)
        try:
            outcome, fresh = await pool.fit(spec, x, "m", budget=120)
            model = await asyncio.to_thread(fresh.wait)
            # the worker is back in the pool once its model arrived: a second fit reuses it
            again, fresh_again = await pool.fit(spec, x, "m", budget=120)
            assert again.header["checksum"] != outcome.header["checksum"]  # fitted_at differs
            assert await asyncio.to_thread(fresh_again.wait) is not None
            return outcome, model, pool.killed
        finally:
            pool.close()

    outcome, model, killed = asyncio.run(run())
    assert killed == 0
    assert model is not None
    assert model.stats == outcome.stats and model.n_features == outcome.n_features == 3
    assert model.training_time_ms == outcome.training_time_ms
    stored = codec.decode(outcome.header, outcome.blob, max_bytes=10**8)  # what a restart loads
    # the stored rows were scaled by the server while the worker fitted: the worker's own, bit for bit
    assert np.array_equal(stored.train, model.train) and np.array_equal(stored.center, model.center)
    assert np.array_equal(stored.fingerprint, model.fingerprint) and stored.stats == model.stats
    assert np.array_equal(model.raw_scores(x), stored.raw_scores(x))


def test_a_model_that_never_arrives_means_a_refit_from_the_store() -> None:
    fresh = worker.FreshModel()
    fresh.set(None)
    assert fresh.ready() and fresh.wait(0.1) is None
    assert worker.FreshModel().wait(0.01) is None  # still on its way past the wait: refit too


def test_a_fit_whose_stored_form_fails_is_refused_and_its_worker_stays_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    x, _ = blobs(n=200, outliers=10, seed=32)
    spec = fitted.FitSpec(
        backend="isolation_forest", params=check_params(DETECTORS["isolation_forest"], {}), contamination=0.05
    )
    real = codec.encode_fit

    def refuse(*args: object, **kwargs: object) -> object:
        raise ValueError("Out of range float values are not JSON compliant")

    async def run() -> int:
        pool = worker.FitPool(1)
        try:
            monkeypatch.setattr(codec, "encode_fit", refuse)
            with pytest.raises(worker.FitFailed) as refused:
                await pool.fit(spec, x, "m", budget=120)
            assert refused.value.client_error and refused.value.code == "invalid_fit"
            monkeypatch.setattr(codec, "encode_fit", real)
            # the same worker, its pipe drained of the refused fit's model
            outcome, fresh = await pool.fit(spec, x, "m", budget=120)
            model = await asyncio.to_thread(fresh.wait)
            assert model is not None and model.stats == outcome.stats
            return pool.killed
        finally:
            pool.close()

    assert asyncio.run(run()) == 0


def test_a_failure_while_the_server_archives_the_rows_is_a_failed_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server writes the stored form's rows while the worker fits: a failure there (a
    # MemoryError in codec.Archive) is the same FitFailed as one in the worker, not an
    # exception that escapes the pool, and the worker in the middle of its answer is replaced.
    x, _ = blobs(n=200, outliers=10, seed=33)
    spec = fitted.FitSpec(
        backend="isolation_forest", params=check_params(DETECTORS["isolation_forest"], {}), contamination=0.05
    )

    def out_of_memory(*args: object, **kwargs: object) -> codec.Archive:
        raise MemoryError

    async def run() -> int:
        pool = worker.FitPool(1)
        try:
            with monkeypatch.context() as patched:
                patched.setattr(codec, "Archive", out_of_memory)
                with pytest.raises(worker.FitFailed) as failed:
                    await pool.fit(spec, x, "m", budget=120)
            assert not failed.value.client_error and failed.value.code == "fit_failed"
            assert "MemoryError" in str(failed.value)
            outcome, fresh = await pool.fit(spec, x, "m", budget=120)  # a fresh worker
            model = await asyncio.to_thread(fresh.wait)
            assert model is not None and model.stats == outcome.stats
            return pool.killed
        finally:
            pool.close()

    assert asyncio.run(run()) == 1
