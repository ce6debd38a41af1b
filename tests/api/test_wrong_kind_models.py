"""A real model of the wrong kind, named on another kind's endpoint: 400
``model_kind_mismatch`` naming ``model``, and nothing is loaded. The embedded
models of the installed plugins stand in for each kind (the kind check runs
before any load, so none is loaded here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexserv_core import ModelKind
from flexserv_core.testing import app_client, make_app

DATA = Path(__file__).resolve().parents[1] / "data"
ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    ModelKind.TEXT: ("/v1/chat/completions", {"json": {"messages": [{"role": "user", "content": "hi"}]}}),
    ModelKind.EMBEDDING: ("/v1/embeddings", {"json": {"input": "hi"}}),
    ModelKind.TRANSCRIPTION: ("/v1/audio/transcriptions", {}),
}


async def test_each_endpoint_refuses_the_embedded_models_of_the_other_kinds() -> None:
    app = make_app(["transformers", "embeddings", "sentence-transformers", "audio", "whisper"])
    catalog = app.state.flexserv.catalog
    models = {kind: catalog.default(kind) for kind in ENDPOINTS}
    assert all(models.values()), models
    async with app_client(app) as client:
        for kind, (path, body) in ENDPOINTS.items():
            for other, spec in models.items():
                if other == kind:
                    continue
                assert spec is not None
                if kind == ModelKind.TRANSCRIPTION:
                    audio = ("speech.ogg", (DATA / "speech.ogg").read_bytes(), "audio/ogg")
                    r = await client.post(path, files={"file": audio}, data={"model": spec.name})
                else:
                    r = await client.post(path, json={**body["json"], "model": spec.name})
                assert r.status_code == 400, (path, spec.name, r.text)
                error = r.json()["error"]
                assert (error["code"], error["param"]) == ("model_kind_mismatch", "model"), (path, error)
                assert spec.name in error["message"]
    assert app.state.flexserv.registry.loaded() == []
