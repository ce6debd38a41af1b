"""Shared fixtures: tiny random BERT checkpoints (built once per session) and an app serving them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from flexserv_classification.testing import SENTIMENT_LABELS, build_tiny_bert
from litestar import Litestar

from flexserv_core.testing import make_app, running_app_client


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A cross-encoder (one logit), a 3-label classifier and a B-/I- token classifier."""
    root = tmp_path_factory.mktemp("tiny-bert")
    return {
        "ce": build_tiny_bert(root / "ce", num_labels=1, seed=1),
        "cl": build_tiny_bert(root / "cl", labels=SENTIMENT_LABELS, seed=2),
        "tk": build_tiny_bert(root / "tk", head="token", seed=3),
    }


@pytest.fixture(scope="module")
def cls_settings() -> dict[str, Any]:
    return {}


@pytest.fixture(scope="module")
def cls_app(tiny_models: dict[str, Path], cls_settings: dict[str, Any]) -> Litestar:
    models = [
        f"rerank:ce={tiny_models['ce']}",
        f"classify:cl={tiny_models['cl']}",
        f"token-classify:tk={tiny_models['tk']}",
    ]
    return make_app(["classification"], settings={"model": models, **cls_settings})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(cls_app: Litestar) -> AsyncIterator[Any]:
    async with running_app_client(cls_app) as c:
        yield c
