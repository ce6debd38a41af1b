"""One app per test module with the ``ocr`` plugin as installed (its entry point)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from litestar import Litestar

from flexserv_core.testing import make_app, running_app_client


@pytest.fixture(scope="module")
def ocr_settings() -> dict[str, Any]:
    return {}


@pytest.fixture(scope="module")
def ocr_app(ocr_settings: dict[str, Any]) -> Litestar:
    return make_app(["ocr"], settings=ocr_settings)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(ocr_app: Litestar) -> AsyncIterator[Any]:
    async with running_app_client(ocr_app) as c:
        yield c
