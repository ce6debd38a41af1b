"""Chat, embeddings and transcription defaults side by side in one app, as ``flexserv
run`` with no flags has them (every plugin, the transformers backend too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def flexserv_plugins() -> list[object | str]:
    return ["transformers", "embeddings", "sentence-transformers", "audio", "whisper"]


async def test_all_three_defaults_are_offered_and_two_serve(
    flexserv_client: Any, flexserv_openai: Any, flexserv_server: Any
) -> None:
    defaults = (await flexserv_client.get("/v1/flexserv/info")).json()["defaults"]
    assert set(defaults) == {"text", "embedding", "transcription"}, defaults
    assert defaults["embedding"] == "all-MiniLM-L6-v2" and defaults["transcription"] == "whisper-tiny.en"
    kinds = {m["id"]: m["kind"] for m in (await flexserv_client.get("/v1/models")).json()["data"]}
    assert (
        kinds[defaults["text"]] == "text"
        and kinds["all-MiniLM-L6-v2"] == "embedding"
        and kinds["whisper-tiny.en"] == "transcription"
    )
    # requests that name no model get the default of their endpoint's kind
    r = await flexserv_client.post("/v1/embeddings", json={"input": "hello"})
    assert r.status_code == 200 and r.json()["model"] == "all-MiniLM-L6-v2"
    text = await flexserv_openai.audio.transcriptions.create(
        file=("speech.ogg", (DATA / "speech.ogg").read_bytes()), model="whisper-tiny.en", response_format="text"
    )
    assert "weekly report" in text.lower()
    loaded = {
        (m["model_id"], m["kind"]) for m in (await flexserv_client.get("/v1/flexserv/models/loaded")).json()["models"]
    }
    assert loaded == {("all-MiniLM-L6-v2", "embedding"), ("whisper-tiny.en", "transcription")}
    health = (await flexserv_client.get("/v1/flexserv/health")).json()
    assert health["embedding_model"]["state"] == "ready" and health["transcription_model"]["state"] == "ready"
