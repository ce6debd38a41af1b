"""One stored model fitted, scored, unloaded and deleted at once: every answer is a
success or an OpenAI-shaped 4xx, no lease is left behind and the name still works."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from anomaly_client import Serve, error, fit, score
from synthetic import blobs

pytestmark = pytest.mark.slow


async def _race(client: httpx.Client, calls: list[tuple[str, str, dict[str, Any] | None]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=client.base_url, timeout=60) as http:
        return await asyncio.gather(*(http.request(method, path, json=body) for method, path, body in calls))


def _no_leases(client: httpx.Client) -> None:
    # the registry's count, detached (unloading) models included
    assert client.get("/v1/flexserv/health").json()["active_requests"] == 0


def test_fits_of_one_name_without_overwrite_store_it_once(serve: Serve) -> None:
    train, _ = blobs(n=60, outliers=3, seed=12)
    body = {"model": "once", "data": train.tolist(), "overwrite": False}
    with serve() as client:
        answers = asyncio.run(_race(client, [("POST", "/v1/anomaly/fit", body)] * 3))
        assert sorted(r.status_code for r in answers) == [200, 400, 400], [r.text for r in answers]
        for r in answers:
            if r.status_code == 400:
                assert error(r, 400)["code"] == "model_exists"
        assert len(score(client, model="once", data=train[:2].tolist())["data"]) == 2


def test_scores_racing_unloads_refits_and_deletes_end_well(serve: Serve) -> None:
    train, _ = blobs(n=60, outliers=3, seed=13)
    probe = {"model": "raced", "data": train[:3].tolist()}
    unload = {"model_id": "raced"}
    with serve() as client:
        for _ in range(3):
            fit(client, model="raced", data=train.tolist())
            calls: list[tuple[str, str, dict[str, Any] | None]] = [("POST", "/v1/anomaly/score", probe)] * 6
            calls += [("POST", "/v1/flexserv/models/unload", unload), ("POST", "/v1/anomaly/load", {"model": "raced"})]
            calls += [("POST", "/v1/anomaly/fit", {"model": "raced", "data": train.tolist()})]
            calls += [("DELETE", "/v1/anomaly/models/raced", None)] * 2
            answers = asyncio.run(_race(client, calls))
            for r in answers[:6] + answers[7:8]:
                if r.status_code != 200:
                    assert error(r, 404)["code"] == "model_not_found"
            if answers[6].status_code != 200:  # a name only the plugin resolves is found while it is loaded
                assert error(answers[6], 404)["code"] == "model_not_found"
            assert answers[8].status_code == 200, answers[8].text
            assert sorted(r.status_code for r in answers[9:]) in ([200, 200], [200, 404]), [r.text for r in answers]
            _no_leases(client)
        # nothing was lost or left half-stored: the name fits and scores again
        fit(client, model="raced", data=train.tolist())
        assert len(score(client, **probe)["data"]) == 3
        _no_leases(client)
