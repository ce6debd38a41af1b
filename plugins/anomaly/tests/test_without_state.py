"""``-p no:state``: the server starts without a store; what keeps fitted models says
so with an OpenAI-shaped 503, and the detectors list is still served."""

from __future__ import annotations

import httpx

from flexserv_core.testing import ServedApp, make_app


def test_without_the_state_plugin_fitted_models_are_a_clear_503() -> None:
    with ServedApp(make_app(["anomaly"], block=["state"])) as url, httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/v1/anomaly/backends").status_code == 200
        fit = {"model": "m", "backend": "isolation_forest", "data": [[1.0], [2.0], [3.0]], "overwrite": True}
        for answer in (client.post("/v1/anomaly/fit", json=fit), client.get("/v1/anomaly/models")):
            assert answer.status_code == 503, answer.text
            error = answer.json()["error"]
            assert error["code"] == "state_unavailable" and "the 'state' plugin" in error["message"], error
