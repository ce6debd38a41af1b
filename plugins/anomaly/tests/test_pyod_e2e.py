"""ECOD and COPOD, with the optional ``pyod`` extra installed (``pip install 'flexserv-anomaly[pyod]'``).

Without the extra these detectors answer a 400 naming it (``test_limits_e2e.py``), so
this module is skipped: it is the one place where a missing package is not a failure,
because the package is optional by design.
"""

from __future__ import annotations

import numpy as np
import pytest
from anomaly_client import Serve, fit, score
from sklearn.metrics import roc_auc_score
from synthetic import blobs

pytest.importorskip("pyod", reason="the optional 'pyod' extra is not installed")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ecod", "copod"])
def test_pyod_detectors_find_the_outliers_and_survive_a_restart(serve: Serve, backend: str) -> None:
    train, _ = blobs(n=600, outliers=30, seed=0)
    test_x, test_y = blobs(n=300, outliers=30, seed=1)
    with serve() as client:
        fit(client, model=backend, backend=backend, data=train.tolist(), contamination=0.05)
        before = score(client, model=backend, data=test_x.tolist())
        auc = roc_auc_score(test_y, [d["score"] for d in before["data"]])
        print(backend, "ROC AUC", auc)
        # ECOD and COPOD score each feature's tails, so like MAD they miss outliers between clusters.
        assert auc >= 0.8
    with serve() as client:
        after = score(client, model=backend, data=test_x.tolist())
    assert np.allclose([d["raw_score"] for d in after["data"]], [d["raw_score"] for d in before["data"]])
