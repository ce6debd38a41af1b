"""With the defaults, stored responses live in the SQLite file under the cache
directory: a real ``flexserv run`` (embedded SmolLM2) is stopped and started
again, and ``previous_response_id``, ``GET`` and input items still answer, for
the key that stored them only. A state file that cannot be opened stops start-up
with an error naming it."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from flexserv_core.testing import flexserv_cmd, free_port, run_flexserv, wait_healthy

pytestmark = pytest.mark.slow
SMOLLM = "SmolLM2-135M-Instruct"


def serve(cache: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "FLEXSERV_CACHE_DIR": str(cache), "FLEXSERV_API_KEY": "alpha,beta"}
    return subprocess.Popen(
        flexserv_cmd("run", "--port", str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    return output


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cache"


def client(port: int, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=300)


def test_stored_responses_survive_a_restart(cache: Path) -> None:
    port = free_port()
    proc = serve(cache, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        first = client(port, "alpha").responses.create(
            model=SMOLLM, input="Name a colour.", max_output_tokens=8, temperature=0
        )
        output = stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert f"state store: sqlite://{cache}/state.db" in output
    assert (cache / "state.db").is_file()

    proc = serve(cache, port)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        alpha = client(port, "alpha")
        again = alpha.responses.retrieve(first.id)
        assert again.output_text == first.output_text and again.usage == first.usage
        items = alpha.responses.input_items.list(first.id)
        assert [item.content[0].text for item in items.data] == ["Name a colour."]
        follow = alpha.responses.create(
            model=SMOLLM, input="Another one.", previous_response_id=first.id, max_output_tokens=8, temperature=0
        )
        assert follow.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
        beta = client(port, "beta")  # another key: the response is not there for it
        with pytest.raises(openai.NotFoundError):
            beta.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError) as caught:
            beta.responses.create(model=SMOLLM, input="x", previous_response_id=first.id, max_output_tokens=2)
        assert caught.value.code == "previous_response_not_found"
        alpha.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            alpha.responses.retrieve(first.id)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/flexserv/health").status_code == 200
        stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_state_file_that_cannot_be_opened_stops_start_up(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    url = f"sqlite://{blocker}/state.db"
    result = run_flexserv("run", "--port", str(free_port()), "--state-url", url, timeout=120)
    assert result.returncode != 0
    assert f"Cannot open the state store {url}" in result.stderr + result.stdout
