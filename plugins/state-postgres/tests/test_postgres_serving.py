"""A server on PostgreSQL: a database that goes away gives 503 on the routes that
need it while the rest keeps serving, and comes back without a restart; one that
hangs (no answer, no reset) is a bounded wait; one that cannot be reached at start-up stops ``flexserv run`` naming the URL without its
password; two processes write at once and a SIGKILL mid-upload leaves nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from flexserv_state import Collection, CollectionLimits, StateStore, start_state_writer, stored_writes
from flexserv_state_postgres.backend import PostgresBackend
from flexserv_state_postgres.testing import PostgresServer, running_postgres

from flexserv_core import StateUnavailable
from flexserv_core.testing import FakeBackendPlugin, app_client, free_port, make_app, run_flexserv, wait_until_async


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own, to stop and start again."""
    with running_postgres() as server:
        yield server


@pytest.mark.slow  # stops and restarts a PostgreSQL server, then waits for the pool to reconnect
async def test_an_outage_gives_503_only_where_the_store_is_needed(own_server: PostgresServer) -> None:
    app = make_app(
        [FakeBackendPlugin(eos_after=5), "state-postgres", "responses"], settings={"state_url": own_server.url()}
    )
    async with app_client(app) as client:
        stored = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"})
        assert stored.status_code == 200, stored.text
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
        health = await client.get("/v1/flexserv/health")
        assert health.status_code == 200  # ready still: the routes without state serve
        assert health.json()["state"]["status"] == "unavailable", health.text
        assert "postgresql://flexserv:***@" in health.json()["state"]["error"]
        assert own_server.password not in health.text
        own_server.start()

        async def served_again() -> bool:
            answer = await client.get(f"/v1/responses/{response_id}")
            return answer.status_code == 200 and answer.json()["id"] == response_id

        # the pool replaces its broken connections by itself: no restart of the app
        await wait_until_async(served_again, timeout=60, message="the stored response to be served again")
        assert (await client.get("/v1/flexserv/health")).json()["state"]["status"] == "ok"


def server_processes(server: PostgresServer) -> list[int]:
    """The postmaster this test started and its children (the backends of each connection)."""
    assert server.process is not None
    parent = server.process.pid
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == parent:
            children.append(int(stat.parent.name))
    return [parent, *children]


@pytest.mark.slow  # waits out the bound, and psycopg's own cancellation of the hung query
async def test_a_hung_database_is_a_bounded_wait(own_server: PostgresServer) -> None:
    store = StateStore(PostgresBackend(own_server.url(), pool_timeout=1, answer_timeout=1))
    await store.open()
    files = store.collection("files", CollectionLimits(max_bytes=10**6))
    kept = await files.put({"n": 1}, owner=None)
    frozen = server_processes(own_server)
    for pid in frozen:  # it accepts bytes (the kernel does) but never answers, like a cut network
        os.kill(pid, signal.SIGSTOP)
    try:
        for attempt in (files.get(kept.id, owner=None), files.put({"n": 2}, owner=None)):
            started = time.monotonic()
            with pytest.raises(StateUnavailable):
                await asyncio.wait_for(attempt, timeout=30)
            assert time.monotonic() - started < 15  # 1 s, and up to 10 s of psycopg's cancelling
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    try:
        await wait_until_async(
            lambda: _found(files, kept.id), timeout=30, message="the store to answer again after the freeze"
        )
    finally:
        await store.close()


async def _found(files: Collection, record_id: str) -> bool:
    try:
        return await files.get(record_id, owner=None) is not None
    except StateUnavailable:
        return False


@pytest.mark.slow
def test_an_unreachable_database_stops_start_up(postgres_server: PostgresServer) -> None:
    closed = postgres_server.url().replace(f":{postgres_server.port}/", f":{free_port()}/")
    result = run_flexserv("run", "--port", str(free_port()), "--state-url", closed, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "State store postgresql://flexserv:***@127.0.0.1:" in output and "cannot be reached" in output
    assert postgres_server.password not in output


async def stored_payloads(url: str) -> list[dict[str, object]]:
    store = StateStore(PostgresBackend(url))
    await store.open()
    try:
        return await stored_writes(store)
    finally:
        await store.close()


@pytest.mark.slow
async def test_two_processes_write_and_sigkill_leaves_whole_records(postgres_url: str) -> None:
    stalled = start_state_writer(postgres_url, "stalled", 0)
    writers = [start_state_writer(postgres_url, name, 40) for name in ("a", "b")]
    busy: subprocess.Popen[str] | None = None
    try:
        for process in writers:
            out, _ = await asyncio.to_thread(process.communicate, timeout=120)
            assert process.returncode == 0, out
        assert stalled.stdout is not None
        assert await asyncio.to_thread(stalled.stdout.readline) == "stalled\n"
        busy = start_state_writer(postgres_url, "busy", 100_000)
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
