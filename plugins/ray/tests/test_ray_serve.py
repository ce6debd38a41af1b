"""FlexServ on a real local Ray cluster: replicas, a killed replica, multiplexing, autoscaling,
state shared by replicas (SQLite and PostgreSQL).

The module starts one private cluster on 127.0.0.1 (``address="local"``, never one
another process runs) and tears it down with ``serve.shutdown()`` and
``ray.shutdown()``; the only process killed by hand is a replica this cluster
started, by its PID from Ray's state API.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

# A plain import: `make setup` installs this plugin and so Ray; a missing Ray fails, never skips.
import ray
from flexserv_ray.app import application
from flexserv_ray.app_args import app_args_from
from flexserv_ray.cluster import LOCAL_CLUSTER_ENV, RAY_AUTH_ENV
from flexserv_ray.options import RayOptions, deployment_options
from flexserv_ray.proxy_errors import proxy_env
from ray import serve

from flexserv_core.testing import free_port, make_plugin_manager, make_settings, wait_until_async

pytestmark = pytest.mark.slow

TESTS_DIR = Path(__file__).parent
APP = "flexserv-test"
FAKE = ["-p", "ray_fake_backend"]
# The state API's address (this module's cluster's dashboard): without it, Ray looks for
# "the" cluster on the machine and fails when another one is running.
STATE_API: dict[str, str] = {}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    saved = os.environ.get("PYTHONPATH")
    # Replicas import the test plugin module by name; workers inherit this from the raylet.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), saved) if p)
    os.environ["FLEXSERV_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # As `flexserv ray-serve` does for the cluster it starts: the proxy shapes its errors,
    # and a proxy slow to start on a busy machine is not killed as unhealthy.
    proxy_vars = {**LOCAL_CLUSTER_ENV, **proxy_env(retry_after=1.0)}
    os.environ.update(proxy_vars)
    # This process imported Ray with authentication off: a token mode another test of
    # the session left in the environment would make the new cluster refuse it.
    auth = {name: os.environ.pop(name) for name in RAY_AUTH_ENV if name in os.environ}
    port, dashboard_port = free_port(), free_port()
    try:  # the environment is restored even when the cluster fails to start
        # Ray's state API (replica PIDs, replica counts) is served by the dashboard
        # process, so this cluster has one, on a free loopback port.
        ray.init(
            address="local",
            num_cpus=4,
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            dashboard_port=dashboard_port,
            _node_ip_address="127.0.0.1",
        )
        STATE_API["address"] = f"http://127.0.0.1:{dashboard_port}"
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            serve.shutdown()
            ray.shutdown()
        os.environ.pop("FLEXSERV_DISABLE_PLUGIN_AUTOLOAD", None)
        os.environ.update(auth)
        for name in proxy_vars:
            os.environ.pop(name, None)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def deploy(plugins: list[str], settings: dict[str, Any], options: RayOptions, **override: Any) -> None:
    # autoload is off: replicas open the command's store (the state plugin's), by default a SQLite file
    # (the state-sqlite plugin's)
    plugins = [*plugins, "-p", "state", "-p", "state-sqlite"]
    pm = make_plugin_manager([p for p in plugins if p != "-p"])
    resolved = make_settings(pm, settings)
    args = app_args_from(
        [p for p in plugins if p != "-p"], resolved, models_per_replica=options.models_per_replica, include_secrets=True
    )
    opts = deployment_options(options, {}, shutdown_timeout=resolved.core.shutdown_timeout) | override
    serve.run(application(args, opts), name=APP, route_prefix="/")


@pytest.fixture
def deployed(cluster: str) -> Iterator[Callable[..., str]]:
    def run(*args: Any, **kwargs: Any) -> str:
        deploy(*args, **kwargs)
        return cluster

    yield run
    serve.delete(APP)


def replica_actors() -> list[Any]:
    from ray.util.state import list_actors

    return [
        a
        for a in list_actors(address=STATE_API["address"], filters=[("state", "=", "ALIVE")], limit=100)
        if a.class_name.startswith("ServeReplica:") and APP in a.class_name
    ]


def replica_ids() -> set[str]:
    return {a.name.rsplit("#", 1)[-1] for a in replica_actors()}


def routed_models() -> dict[str, set[str]]:
    """Replica id -> its multiplexed models, as Ray's controller last broadcast them to
    the routers (the proxy's router picks replicas by exactly this): the long-poll
    snapshot a router receives, asked for with a snapshot id no router has (-1), so
    the controller answers at once."""
    from flexserv_ray.options import DEPLOYMENT_NAME
    from ray.serve._private.common import DeploymentID
    from ray.serve._private.long_poll import LongPollNamespace
    from ray.serve.context import _get_global_client

    key = (LongPollNamespace.DEPLOYMENT_TARGETS, DeploymentID(name=DEPLOYMENT_NAME, app_name=APP))
    controller = _get_global_client()._controller
    updates = ray.get(controller.listen_for_change.remote({key: -1}), timeout=30)
    if not isinstance(updates, dict) or key not in updates:
        return {}
    return {r.replica_id.unique_id: set(r.multiplexed_model_ids) for r in updates[key].object_snapshot.running_replicas}


async def wait_until_routed(replica: str, model: str, timeout: float = 30) -> None:
    """Until the routers have been told that ``replica`` holds ``model`` (bounded)."""
    deadline = time.monotonic() + timeout
    while model not in (seen := await asyncio.to_thread(routed_models)).get(replica, set()):
        if time.monotonic() > deadline:
            raise AssertionError(f"after {timeout} s the routers still see {seen}, not {model} on {replica}")
        await asyncio.sleep(0.1)


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def stream_chat(
    client: openai.AsyncOpenAI, model: str, max_tokens: int, started: asyncio.Semaphore | None = None, **extra: Any
) -> tuple[str, str, str]:
    """(replica id, text, finish_reason) of one streamed chat completion; ``started`` is
    released once, at its first chunk."""
    raw = await client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=max_tokens,
        stream=True,
        **extra,
    )
    replica = raw.headers["x-flexserv-replica"]
    text, finish = "", ""
    async for chunk in raw.parse():
        if started is not None and not text and not finish:
            started.release()
            started = None
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return replica, text, finish


def client_for(base_url: str, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120, **kwargs)


async def test_two_replicas_of_the_embedded_chat_model_share_40_streams(deployed: Callable[..., str]) -> None:
    base = deployed(["transformers"], {"default_max_tokens": 8}, RayOptions(replicas=2, num_cpus=1))
    async with client_for(base) as client:
        results = await asyncio.gather(*(stream_chat(client, "SmolLM2-135M-Instruct", 4) for _ in range(40)))
    assert all(finish in ("length", "stop") and text for _, text, finish in results)
    served = {replica for replica, _, _ in results}
    assert len(served) == 2, served
    assert served == replica_ids()  # the header names the replicas Ray runs


async def assert_follow_ups_found(base: str) -> None:
    """20 responses, then 20 follow-ups by ``previous_response_id``, over 2 replicas: all found."""
    async with client_for(base) as client:

        async def turn(**extra: Any) -> tuple[str, Any]:
            raw = await client.responses.with_raw_response.create(
                model="fake-a", input="hi", max_output_tokens=4, **extra
            )
            return raw.headers["x-flexserv-replica"], raw.parse()

        firsts = await asyncio.gather(*(turn() for _ in range(20)))
        follows = await asyncio.gather(*(turn(previous_response_id=r.id) for _, r in firsts))
    # 20 of 20 found: an unknown previous_response_id is a 404, which the SDK raises
    assert len(follows) == 20 and all(f.status in ("completed", "incomplete") for _, f in follows)
    assert all(f.usage.input_tokens > r.usage.input_tokens for (_, r), (_, f) in zip(firsts, follows, strict=True))
    answered = {replica for replica, _ in firsts + follows}
    assert len(answered) == 2, answered  # both replicas served, so follow-ups crossed between them


async def test_every_previous_response_id_is_found_whichever_replica_answers(
    deployed: Callable[..., str], tmp_path: Path
) -> None:
    state = f"sqlite://{tmp_path}/state.db"
    base = deployed(
        [*FAKE, "-p", "responses"],
        {"model": ["fake-a=fake://a"], "state_url": state},
        RayOptions(replicas=2, num_cpus=1),
    )
    await assert_follow_ups_found(base)


async def test_every_previous_response_id_is_found_on_postgresql(
    deployed: Callable[..., str], postgres_url: str
) -> None:
    base = deployed(
        [*FAKE, "-p", "state-postgres", "-p", "responses"],
        {"model": ["fake-a=fake://a"], "state_url": postgres_url},
        RayOptions(replicas=2, num_cpus=1),
    )
    await assert_follow_ups_found(base)


async def raw_stream(
    http: httpx.AsyncClient, model: str, max_tokens: int, started: asyncio.Semaphore | None = None
) -> tuple[str, list[str]]:
    """(replica id, the ``data:`` payloads in order) of one streamed chat, read as raw SSE;
    ``started`` is released once, at the stream's first payload."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": max_tokens}
    payloads: list[str] = []
    async with http.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as response:
        assert response.status_code == 200, response.status_code
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                payloads.append(line.removeprefix("data: "))
                if started is not None and len(payloads) == 1:
                    started.release()
    return response.headers["x-flexserv-replica"], payloads


async def all_started(started: asyncio.Semaphore, count: int) -> None:
    """Wait until ``count`` streams have sent their first payload."""
    for _ in range(count):
        await asyncio.wait_for(started.acquire(), timeout=60)


async def test_a_killed_replica_is_replaced_and_its_streams_end_with_an_error_event(
    deployed: Callable[..., str],
) -> None:
    base = deployed(FAKE, {"model": ["fake-a=fake://a"], "fake_token_delay": 0.05}, RayOptions(replicas=2, num_cpus=1))
    original_ids = replica_ids()
    victim = replica_actors()[0]
    victim_id = victim.name.rsplit("#", 1)[-1]
    async with client_for(base) as client, httpx.AsyncClient(base_url=base, timeout=120) as http:
        started = asyncio.Semaphore(0)
        running = [asyncio.create_task(raw_stream(http, "fake-a", 40, started)) for _ in range(10)]  # ~2 s each
        await all_started(started, 10)
        os.kill(victim.pid, signal.SIGKILL)
        await wait_until_async(lambda: not psutil.pid_exists(victim.pid), timeout=30, interval=0.05)
        after = await asyncio.gather(*(stream_chat(client, "fake-a", 5) for _ in range(10)))
        # No connection error: every stream of the first wave ends as an event stream.
        first_wave = await asyncio.gather(*running)
    # Requests sent after the kill never started on the dead replica: all complete.
    assert all(finish == "length" and len(text) == 5 for _, text, finish in after)
    cut = [payloads for replica, payloads in first_wave if replica == victim_id]
    assert cut, "no stream was on the killed replica"
    for payloads in cut:
        # Some tokens, then an OpenAI-shaped error event, then [DONE].
        assert payloads[-1] == "[DONE]", payloads[-3:]
        error = json.loads(payloads[-2])["error"]
        assert error["code"] == "replica_failed" and error["type"] == "server_error", error
        assert set(error) == {"message", "type", "param", "code"}
        assert 0 < len(payloads) - 2 < 40 + 1  # cut short
    for replica, payloads in first_wave:
        if replica != victim_id:  # streams on the survivor completed
            assert payloads[-1] == "[DONE]" and json.loads(payloads[-2])["choices"][0]["finish_reason"] == "length"
    replacement = wait_for(lambda: replica_ids() - original_ids, 60, "a replacement replica")
    async with client_for(base) as client:
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while not seen & replacement and time.monotonic() < deadline:
            results = await asyncio.gather(*(stream_chat(client, "fake-a", 2) for _ in range(6)))
            seen |= {r for r, _, _ in results}
    assert seen & replacement, (seen, replacement)  # the new replica serves
    assert victim_id not in seen


async def test_a_cut_stream_raises_an_api_error_in_the_openai_sdk(deployed: Callable[..., str]) -> None:
    base = deployed(FAKE, {"model": ["fake-a=fake://a"], "fake_token_delay": 0.05}, RayOptions(replicas=1, num_cpus=1))
    victim = replica_actors()[0]
    async with client_for(base) as client:
        started = asyncio.Semaphore(0)
        stream = asyncio.create_task(stream_chat(client, "fake-a", 40, started))
        await all_started(started, 1)
        os.kill(victim.pid, signal.SIGKILL)
        with pytest.raises(openai.APIError) as cut:
            await stream
    # The SDK's own error for an error event (not a connection error), with the server's body.
    assert type(cut.value) is openai.APIError
    assert isinstance(cut.value.body, dict) and cut.value.body["code"] == "replica_failed"


async def test_overload_is_an_openai_shaped_429_with_retry_after(deployed: Callable[..., str]) -> None:
    base = deployed(
        FAKE,
        {"model": ["fake-a=fake://a"], "fake_token_delay": 0.05},
        RayOptions(replicas=1, num_cpus=1, max_ongoing_requests=1, max_queued_requests=1, retry_after=2),
    )
    async with client_for(base) as client:
        # each stream takes ~2 s, so all six reach the proxy while the first still runs
        results = await asyncio.gather(*(stream_chat(client, "fake-a", 40) for _ in range(6)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, BaseException)]
    served = [r for r in results if not isinstance(r, BaseException)]
    # One runs, at most one waits in the proxy's queue, the rest are refused at once; none
    # hangs. (Ray's queue count is the proxy router's, which can still hold a request of
    # the previous test's deployment of the same name: then the queue is already full.)
    assert 1 <= len(served) <= 2 and len(refused) >= 4, results
    for exc in refused:
        assert isinstance(exc, openai.RateLimitError), repr(exc)
        assert exc.response.headers["retry-after"] == "2"
        assert exc.response.headers["content-type"] == "application/json"
        assert exc.body["type"] == "rate_limit_error" and exc.body["code"] == "too_many_requests", exc.body
        assert set(exc.body) == {"message", "type", "param", "code"}
    assert all(finish == "length" for _, _, finish in served)


async def test_multiplexing_routes_each_model_to_the_replica_holding_it(deployed: Callable[..., str]) -> None:
    base = deployed(
        FAKE,
        {"model": ["fake-a=fake://a", "fake-b=fake://b"]},
        RayOptions(replicas=2, num_cpus=1, models_per_replica=1),
    )

    def headers(model: str) -> dict[str, str]:
        return {"serve_multiplexed_model_id": model}

    async with client_for(base) as client:
        first_a, _, _ = await stream_chat(client, "fake-a", 2, extra_headers=headers("fake-a"))
        await wait_until_routed(first_a, "fake-a")  # the replica has reported its model to the routers
        first_b, _, _ = await stream_chat(client, "fake-b", 2, extra_headers=headers("fake-b"))
        await wait_until_routed(first_b, "fake-b")
        assert first_a != first_b  # fake-b went to the replica with the fewest models
        for _ in range(6):
            a, b = await asyncio.gather(
                stream_chat(client, "fake-a", 2, extra_headers=headers("fake-a")),
                stream_chat(client, "fake-b", 2, extra_headers=headers("fake-b")),
            )
            assert (a[0], b[0]) == (first_a, first_b)
        with pytest.raises(openai.NotFoundError) as missing:
            await client.chat.completions.create(
                model="no-such-model", messages=[{"role": "user", "content": "hi"}], extra_headers=headers("x")
            )
    assert missing.value.body["code"] == "model_not_found"
    async with httpx.AsyncClient(base_url=base) as http:
        models = (await http.get("/v1/models")).json()
    assert {m["id"] for m in models["data"]} >= {"fake-a", "fake-b"}  # every replica lists the whole catalog


async def test_autoscaling_goes_from_one_to_two_replicas_and_back(deployed: Callable[..., str]) -> None:
    base = deployed(
        FAKE,
        {"model": ["fake-a=fake://a"], "fake_token_delay": 0.05},
        RayOptions(min_replicas=1, max_replicas=2, target_ongoing_requests=1, upscale_delay=0, downscale_delay=2),
        max_ongoing_requests=4,
    )
    assert len(replica_actors()) == 1
    counts: list[int] = []
    async with client_for(base) as client:
        load = [asyncio.create_task(stream_chat(client, "fake-a", 60)) for _ in range(6)]
        deadline = time.monotonic() + 90  # a second replica's start-up, on a busy two-core runner
        while time.monotonic() < deadline and max(counts, default=0) < 2:
            await asyncio.sleep(1)
            counts.append(len(await asyncio.to_thread(replica_actors)))
            if all(t.done() for t in load):
                load += [asyncio.create_task(stream_chat(client, "fake-a", 60)) for _ in range(6)]
        results = await asyncio.gather(*load)
    assert max(counts) == 2, counts
    assert all(finish == "length" for _, _, finish in results)
    wait_for(lambda: len(replica_actors()) == 1, 60, "the scale-down to one replica")
