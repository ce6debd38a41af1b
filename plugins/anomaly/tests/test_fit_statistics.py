"""Where a fit's score statistics come from, without a server: LOF from the factors
its fit computed for every training row, the other detectors from their rows scored
as new ones; the isolation forest's own offset is never computed."""

from __future__ import annotations

import numpy as np
from flexserv_anomaly import fitted
from flexserv_anomaly.detectors import DETECTORS, check_params
from synthetic import blobs


def _spec(backend: str, contamination: float = 0.05) -> fitted.FitSpec:
    return fitted.FitSpec(backend=backend, params=check_params(DETECTORS[backend], {}), contamination=contamination)


def test_lof_statistics_come_from_its_fit_and_its_fingerprint_from_new_row_scores() -> None:
    x, _ = blobs(n=150, outliers=8, seed=21)
    train = np.ascontiguousarray(x, dtype=np.float64)
    detector, fingerprint, raw = fitted.fit_detector(_spec("local_outlier_factor"), train)
    estimator = detector.estimator  # type: ignore[attr-defined]
    # every training row, each among the others: not a sample, not rescored
    assert raw.shape == (len(train),)
    assert np.array_equal(raw, -estimator.negative_outlier_factor_)
    # the fingerprint is what a reload reproduces: the first rows scored as new ones
    rows = min(fitted.FINGERPRINT_ROWS, len(train))
    assert np.array_equal(fingerprint, detector.raw_scores(train[:rows]))


def test_lof_threshold_flags_about_the_contamination_of_the_training_rows() -> None:
    x, _ = blobs(n=200, outliers=10, seed=22)
    model = fitted.fit(_spec("local_outlier_factor", contamination=0.1), x)
    own = -model.detector.estimator.negative_outlier_factor_  # type: ignore[attr-defined]
    flagged = int((own >= model.stats.quantile).sum())
    assert abs(flagged - round(0.1 * len(x))) <= 2


def test_the_isolation_forest_sets_no_offset_fraction_and_keeps_the_fitted_threshold() -> None:
    x, _ = blobs(n=200, outliers=10, seed=23)
    model = fitted.fit(_spec("isolation_forest", contamination=0.1), x)
    assert model.detector.estimator.contamination == "auto"  # type: ignore[attr-defined]
    raw = model.raw_scores(x)
    flagged = int((raw >= model.stats.quantile).sum())
    assert abs(flagged - round(0.1 * len(x))) <= 2
