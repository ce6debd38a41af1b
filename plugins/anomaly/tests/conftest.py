"""A real server (uvicorn on a loopback port) with the anomaly plugin, restartable on the same store."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexserv_core.testing import ServedApp, make_app

sys.path.insert(0, str(Path(__file__).parent))  # the synthetic data module

Serve = Callable[..., AbstractContextManager[httpx.Client]]


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    """``with serve(**settings) as client``: a fresh server on ``tmp_path``'s store each time
    it is entered (leaving and entering again is a restart)."""

    @contextmanager
    def run(plugins: tuple[str, ...] = ("anomaly",), **settings: Any) -> Iterator[httpx.Client]:
        state = f"sqlite://{tmp_path.absolute() / 'state.db'}"  # the default store, which the kit replaces by memory://
        app = make_app(list(plugins), settings={"cache_dir": str(tmp_path), "state_url": state, **settings})
        with ServedApp(app) as url, httpx.Client(base_url=url, timeout=300) as client:
            yield client

    return run


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
