"""Stored things on PostgreSQL raced against their replacement: an anomaly model whose
blob is replaced by a refit while a load reads it loads the new one; the score is
answered, not failed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from flexserv_state import blob_chunks, store_of
from flexserv_state_postgres import backend as pg

from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow  # a PostgreSQL server and the fit workers' processes


def test_a_load_whose_blob_a_refit_replaces_mid_read_loads_the_new_model(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg, "BLOB_ROW", 1024)  # a model of several blob rows: a read spans several queries
    app = make_app(["anomaly", "state-postgres"], settings={"state_url": postgres_url, "cache_dir": str(tmp_path)})
    read_blob = pg.PostgresBackend.read_blob
    raced: list[str] = []

    async def refit_after_the_first_chunk(
        self: pg.PostgresBackend, collection: str, record_id: str, owner: str | None, chunk_size: int
    ) -> AsyncIterator[bytes]:
        chunks = read_blob(self, collection, record_id, owner, chunk_size)
        yield await anext(chunks)
        if not raced:  # the racing refit, once: the same model stored again, under a new record
            raced.append(record_id)
            models = store_of(app.state.flexserv).collection(collection)
            record = await models.get(record_id, owner=owner)
            assert record is not None
            blob = b"".join([c async for c in read_blob(self, collection, record_id, owner, chunk_size)])
            await models.put(record.payload, owner=owner, record_id=record_id, blob=blob_chunks(blob), replace=True)
        async for chunk in chunks:
            yield chunk

    rows = np.random.default_rng(0).normal(size=(200, 3)).tolist()
    with ServedApp(app) as url, httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/anomaly/fit", json={"model": "m", "data": rows}).status_code == 200
        monkeypatch.setattr(pg.PostgresBackend, "read_blob", refit_after_the_first_chunk)
        answer: Any = http.post("/v1/anomaly/score", json={"model": "m", "data": rows[:3]})
        assert raced == ["m"]
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["data"]) == 3
