"""Two servers on one store (replicas): a refit through one is what the other scores
with next, even when the other holds the old model loaded; a delete through one is a
404 through the other."""

from __future__ import annotations

import httpx
import pytest
from anomaly_client import Serve, error, fit, score

ROWS = [[1.0, 2.0], [2.0, 3.0], [3.0, 4.0], [4.0, 5.0], [5.0, 6.0]] * 10
OTHER_ROWS = [[10.0, 2.0], [2.0, 30.0], [3.0, 4.0], [4.0, 5.0], [5.0, 6.0]] * 10


def threshold(client: httpx.Client, name: str) -> float:
    return float(score(client, model=name, data=[[1.0, 2.0]])["summary"]["threshold"])


@pytest.mark.slow  # two servers, each with its fit worker
def test_a_refit_on_one_replica_is_scored_with_on_the_other(serve: Serve) -> None:
    with serve() as first, serve() as second:
        old = fit(first, model="shared", backend="robust_zscore", data=ROWS)["model_params"]["threshold"]
        assert threshold(second, "shared") == old  # loaded there now
        new = fit(first, model="shared", backend="robust_zscore", data=OTHER_ROWS)["model_params"]["threshold"]
        assert new != old
        assert threshold(second, "shared") == new
        loaded = second.post("/v1/anomaly/load", json={"model": "shared"}).json()
        assert loaded["threshold"] == new
        assert first.delete("/v1/anomaly/models/shared").status_code == 200
        missing = second.post("/v1/anomaly/score", json={"model": "shared", "data": [[1.0, 2.0]]})
        assert error(missing, 404)["code"] == "model_not_found"
