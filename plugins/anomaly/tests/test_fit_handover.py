"""The fit pool answers with the encoded model first and hands the fitted object over after."""

from __future__ import annotations

import asyncio

import numpy as np
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
    assert np.array_equal(model.raw_scores(x), stored.raw_scores(x))


def test_a_model_that_never_arrives_means_a_refit_from_the_store() -> None:
    fresh = worker.FreshModel()
    fresh.set(None)
    assert fresh.ready() and fresh.wait(0.1) is None
    assert worker.FreshModel().wait(0.01) is None  # still on its way past the wait: refit too
