"""A real server (uvicorn on a loopback port) with the anomaly plugin, restartable on the same store."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexserv_core.testing import ServedApp, make_app

sys.path.insert(0, str(Path(__file__).parent))  # the synthetic data and client helper modules

from anomaly_client import Serve


@pytest.fixture
def serve(tmp_path: Path) -> Serve:
    """``with serve(**settings) as client``: a fresh server on ``tmp_path``'s store each time
    it is entered (leaving and entering again is a restart)."""

    @contextmanager
    def run(plugins: tuple[str, ...] = ("anomaly",), **settings: Any) -> Iterator[httpx.Client]:
        state = f"sqlite://{tmp_path.absolute() / 'state.db'}"  # the default store, which the kit replaces by memory://
        app = make_app(
            [*plugins, "state-sqlite"], settings={"cache_dir": str(tmp_path), "state_url": state, **settings}
        )
        with ServedApp(app) as url, httpx.Client(base_url=url, timeout=300) as client:
            yield client

    return run
