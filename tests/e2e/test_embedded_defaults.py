"""`flexserv run` with no model flags serves chat, embeddings and transcription from
the embedded defaults at once, as a real process; the README's curl example works."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from flexserv_core.testing.process import flexserv_cmd, free_port, stop_process, wait_healthy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SPEECH = ROOT / "tests" / "data" / "speech.wav"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cache = os.environ.get("FLEXSERV_CACHE_DIR") or str(tmp_path_factory.getbasetemp() / "flexserv-cache")
    port = free_port()
    env = {**os.environ, "FLEXSERV_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1"}
    env.pop("FLEXSERV_PLUGINS", None)
    proc = subprocess.Popen(
        flexserv_cmd("run", "--port", str(port)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        yield base
    finally:
        stop_process(proc)


def readme_curl_body() -> tuple[str, dict]:
    """The path and JSON body of the first curl example in the README."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(curl [^`]*?)```", text, re.S)
    assert block, "README has no curl example"
    args = shlex.split(block.group(1).replace("\\\n", " "))
    url = next(a for a in args if a.startswith("http"))
    body = json.loads(args[args.index("-d") + 1])
    return url.split("8000", 1)[1], body


def test_defaults_are_listed(server: str) -> None:
    models = {m["id"]: m["kind"] for m in httpx.get(f"{server}/v1/models").json()["data"]}
    assert models.get("SmolLM2-135M-Instruct") == "text"
    assert models.get("all-MiniLM-L6-v2") == "embedding"
    assert models.get("whisper-tiny.en") == "transcription"


def test_readme_curl_example(server: str) -> None:
    path, body = readme_curl_body()
    response = httpx.post(f"{server}{path}", json=body, timeout=180)
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]["message"]["content"]
    assert "paris" in answer.lower()


def test_all_three_kinds_served_together(server: str) -> None:
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=180)
    chat = client.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=[{"role": "user", "content": "What is the capital of France? Answer with one word."}],
        max_tokens=8,
        temperature=0,
    )
    assert "paris" in (chat.choices[0].message.content or "").lower()
    embedding = client.embeddings.create(model="all-MiniLM-L6-v2", input=["Paris is in France."])
    assert len(embedding.data[0].embedding) == 384
    with SPEECH.open("rb") as audio:
        transcript = client.audio.transcriptions.create(model="whisper-tiny.en", file=audio)
    spoken = set(re.findall(r"[a-z]+", (ROOT / "tests" / "data" / "speech.txt").read_text().lower()))
    heard = set(re.findall(r"[a-z]+", transcript.text.lower()))
    assert len(spoken & heard) >= 0.6 * len(spoken)
    loaded = {m["model_id"]: m["kind"] for m in httpx.get(f"{server}/v1/flexserv/models/loaded").json()["models"]}
    assert loaded == {
        "SmolLM2-135M-Instruct": "serve",
        "all-MiniLM-L6-v2": "embedding",
        "whisper-tiny.en": "transcription",
    }
    health = httpx.get(f"{server}/v1/flexserv/health").json()
    assert health["model"]["state"] == "ready" and health["model"]["device"] == "cpu"
