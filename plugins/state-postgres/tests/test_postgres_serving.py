"""A server on PostgreSQL: a database that goes away gives 503 on the routes that
need it while the rest keeps serving, and comes back without a restart; one that
cannot be reached at start-up stops ``flexserv run`` naming the URL without its
password; two processes write at once and a SIGKILL mid-upload leaves nothing."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from flexserv_state_postgres.backend import PostgresBackend
from flexserv_state_postgres.testing import PostgresServer

from flexserv_core import StateStore
from flexserv_core.testing import app_client, free_port, make_app, run_flexserv
from flexserv_core.testing.fakes import FakeBackendPlugin
from flexserv_core.testing.state_contract import read_all


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own, to stop and start again."""
    server = PostgresServer()
    server.start()
    try:
        yield server
    finally:
        server.remove()


async def test_an_outage_gives_503_only_where_the_store_is_needed(own_server: PostgresServer) -> None:
    app = make_app([FakeBackendPlugin(eos_after=5), "state-postgres"], settings={"state_url": own_server.url()})
    async with app_client(app) as client:
        stored = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"})
        assert stored.status_code == 200
        response_id = stored.json()["id"]
        own_server.stop()
        for method, path, body in (
            ("POST", "/v1/responses", {"model": "fake-model", "input": "hi"}),
            ("GET", f"/v1/responses/{response_id}", None),
            ("DELETE", f"/v1/responses/{response_id}", None),
        ):
            answer = await client.request(method, path, json=body)
            assert answer.status_code == 503, (method, path, answer.text)
            error = answer.json()["error"]
            assert error["code"] == "state_unavailable"
            assert own_server.password not in answer.text
        chat = await client.post(
            "/v1/chat/completions", json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert chat.status_code == 200
        assert (await client.get("/health")).status_code == 200
        own_server.start()
        again = await client.get(f"/v1/responses/{response_id}")
        assert again.status_code == 200 and again.json()["id"] == response_id


@pytest.mark.slow
def test_an_unreachable_database_stops_start_up(postgres_server: PostgresServer) -> None:
    closed = postgres_server.url().replace(f":{postgres_server.port}/", f":{free_port()}/")
    result = run_flexserv("run", "--port", str(free_port()), "--state-url", closed, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "State store postgresql://flexserv:***@127.0.0.1:" in output and "cannot be reached" in output
    assert postgres_server.password not in output


WRITER = textwrap.dedent(
    """
    import asyncio, hashlib, sys
    from flexserv_core import CollectionLimits, StateStore
    from flexserv_state_postgres.backend import PostgresBackend

    async def chunks(data):
        for i in range(0, len(data), 4096):
            await asyncio.sleep(0)
            yield data[i:i + 4096]

    async def stalled():
        yield b"half of it" * 10000
        print("stalled", flush=True)
        await asyncio.Event().wait()

    async def main(url, name, count):
        store = StateStore(PostgresBackend(url))
        await store.open()
        files = store.collection("files", CollectionLimits(max_bytes=10**9))
        if count == 0:
            await files.put({"writer": name}, owner=None, blob=stalled(), record_id="stalled")
        for n in range(count):
            data = hashlib.sha256(b"%s-%d" % (name.encode(), n)).digest() * (50 + n % 50)
            digest = hashlib.sha256(data).hexdigest()
            await files.put({"writer": name, "n": n, "sha256": digest}, owner=None, blob=chunks(data))
            print(n, flush=True)
        await store.close()

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


def writer(url: str, name: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, url, name, str(count)], stdout=subprocess.PIPE, text=True)


async def stored_payloads(url: str) -> list[dict[str, object]]:
    store = StateStore(PostgresBackend(url))
    await store.open()
    try:
        files = store.collection("files")
        page = await files.list(owner=None, limit=10_000, order="asc")
        for record in page.records:
            data = await read_all(store, "files", record.id, None)
            assert hashlib.sha256(data).hexdigest() == record.payload["sha256"]
        return [r.payload for r in page.records]
    finally:
        await store.close()


@pytest.mark.slow
async def test_two_processes_write_and_sigkill_leaves_whole_records(postgres_url: str) -> None:
    stalled = writer(postgres_url, "stalled", 0)
    writers = [writer(postgres_url, name, 40) for name in ("a", "b")]
    busy: subprocess.Popen[str] | None = None
    try:
        for process in writers:
            out, _ = await asyncio.to_thread(process.communicate, timeout=120)
            assert process.returncode == 0, out
        assert stalled.stdout is not None
        assert await asyncio.to_thread(stalled.stdout.readline) == "stalled\n"
        busy = writer(postgres_url, "busy", 100_000)
        assert busy.stdout is not None
        for _ in range(20):
            await asyncio.to_thread(busy.stdout.readline)
    finally:
        for process in (stalled, *writers, busy):
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
    payloads = await stored_payloads(postgres_url)
    names = sorted((p["writer"], p["n"]) for p in payloads if p["writer"] != "busy")
    assert names == [(w, n) for w in "ab" for n in range(40)]
    assert sum(p["writer"] == "busy" for p in payloads) >= 20
    assert not any(p["writer"] == "stalled" for p in payloads)
