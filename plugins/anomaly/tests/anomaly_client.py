"""Helpers the anomaly tests share: the server factory's type and JSON calls.

A module of its own (not ``conftest``), so that no other test directory's
``conftest`` can stand in for it when the whole suite is collected together."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import httpx

Serve = Callable[..., AbstractContextManager[httpx.Client]]


def fit(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/anomaly/fit", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def score(client: httpx.Client, path: str = "/v1/anomaly/score", **body: Any) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body
