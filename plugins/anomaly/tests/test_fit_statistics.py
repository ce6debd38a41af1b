"""Where a fit's score statistics come from, without a server: LOF from the factors
its fit computed for every training row, the other detectors from their rows scored
as new ones; the isolation forest's own offset is never computed."""

from __future__ import annotations

import numpy as np
import pytest
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


@pytest.mark.parametrize(
    ("kernel", "extra"),
    [("rbf", {}), ("linear", {}), ("poly", {"coef0": 1.0}), ("sigmoid", {"gamma": 0.05}), ("rbf", {"nu": 0.9})],
)
def test_one_class_svm_statistics_equal_libsvm_s_scores_of_the_same_rows(kernel: str, extra: dict) -> None:
    # 2,500 rows: the statistics sample 2,048 of them, and nu=0.9 makes thousands of
    # support vectors, so the kernel expansion runs in several blocks.
    x, _ = blobs(n=2400, outliers=100, seed=24)
    params = check_params(DETECTORS["one_class_svm"], {"kernel": kernel, **extra})
    spec = fitted.FitSpec(backend="one_class_svm", params=params, contamination=0.05)
    center, scale = fitted._scaler(x, "robust")
    train = np.ascontiguousarray((x - center) / scale)
    detector, fingerprint, raw = fitted.fit_detector(spec, train)
    rows = train[fitted.stats_rows(len(train))]
    libsvm = detector.raw_scores(rows)  # what the statistics pass computed before
    assert raw.shape == libsvm.shape
    np.testing.assert_allclose(raw, libsvm, rtol=1e-9, atol=1e-12 * max(1.0, float(np.abs(libsvm).max())))
    # the fingerprint is libsvm's own, to the bit: a reload compares it with its own scores
    assert np.array_equal(fingerprint, libsvm[: fitted.FINGERPRINT_ROWS])
    old = fitted.assemble(spec, center, scale, train, detector, fingerprint, libsvm, 0.0).stats
    new = fitted.assemble(spec, center, scale, train, detector, fingerprint, raw, 0.0).stats
    for field in ("median", "iqr", "mean", "std", "quantile"):
        assert getattr(new, field) == pytest.approx(getattr(old, field), rel=1e-9, abs=1e-12), field


def test_the_robust_scaler_equals_median_and_interquartile_range_column_by_column() -> None:
    rng = np.random.default_rng(25)
    x = rng.normal(size=(1001, 5)) * [1, 10, 100, 0, 1]  # a constant column: IQR and std 0
    x[:, 4] = np.where(rng.random(1001) < 0.9, 3.0, rng.normal(size=1001))  # IQR 0, std > 0
    center, scale = fitted._scaler(x, "robust")
    q75, q25 = np.percentile(x, [75, 25], axis=0)
    spread = np.where(q75 - q25 > 0, q75 - q25, x.std(axis=0))
    np.testing.assert_allclose(center, np.median(x, axis=0), rtol=1e-15, atol=0)
    np.testing.assert_allclose(scale, np.where(spread > 0, spread, 1.0), rtol=1e-15, atol=0)
    assert scale[3] == 1.0 and scale[4] == pytest.approx(x[:, 4].std())


@pytest.mark.parametrize(
    "given", [{}, {"max_features": 0.5}, {"bootstrap": True, "max_samples": 0.3, "n_estimators": 37}]
)
def test_the_isolation_forest_s_scoring_loop_equals_score_samples_bit_for_bit(given: dict) -> None:
    from flexserv_anomaly import detectors

    x, _ = blobs(n=3000, outliers=60, seed=26)
    x = np.hstack([x, x[:, :2] ** 2])  # 5 features, so that 0.5 subsamples them
    detector = detectors.build("isolation_forest", check_params(DETECTORS["isolation_forest"], given), 0.05)
    detector.fit(x)
    library = -detector.estimator.score_samples(x)  # type: ignore[attr-defined]
    assert np.array_equal(detector.raw_scores(x), library)  # first call: checked against the library
    assert detectors._FOREST_LOOP[detectors._forest_subsamples(detector.estimator, x)] is True  # type: ignore[attr-defined]
    assert np.array_equal(detector.raw_scores(x[:7]), library[:7])  # then the loop alone


def test_a_scoring_loop_that_differs_from_the_library_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexserv_anomaly import detectors

    monkeypatch.setattr(detectors, "_FOREST_LOOP", {})
    monkeypatch.setattr(detectors, "_forest_raw_scores", lambda forest, x, subsample, node_depths: np.zeros(len(x)))
    x, _ = blobs(n=300, outliers=10, seed=27)
    detector = detectors.build("isolation_forest", check_params(DETECTORS["isolation_forest"], {}), 0.05)
    detector.fit(x)
    library = -detector.estimator.score_samples(x)  # type: ignore[attr-defined]
    assert np.array_equal(detector.raw_scores(x), library)
    assert detectors._FOREST_LOOP == {False: False}
    assert np.array_equal(detector.raw_scores(x), library)


@pytest.mark.parametrize("order", ["C", "F"])
def test_the_robust_scaler_and_the_scaling_give_numpy_s_values_bit_for_bit(order: str) -> None:
    # The scaler sorts each feature's values before np.percentile, and the fit scales in
    # place: the same values as np.percentile of the rows and (x - center) / scale.
    x, _ = blobs(n=2501, outliers=50, seed=28)
    x = np.asarray(x, order=order)
    center, scale = fitted._scaler(x, "robust")
    q25, median, q75 = np.percentile(x, [25, 50, 75], axis=0)
    assert np.array_equal(center, median) and np.array_equal(scale, q75 - q25)
    model = fitted.fit(_spec("robust_zscore"), x)
    assert model.train.flags.c_contiguous
    assert np.array_equal(model.train, (x - center) / scale)
