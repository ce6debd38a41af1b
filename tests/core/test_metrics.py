"""GET /metrics after real traffic: counters and histograms move by exactly what was served.

Scraped with prometheus_client's own text parser; the fake backend's tokens are
characters, so the responses' usage is the expected count.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, Counter
from prometheus_client.parser import text_string_to_metric_families

from flexserv_core import EngineStats, PluginHookError, hookimpl
from flexserv_core.testing import (
    FakeBackendPlugin,
    FakeTextBackend,
    FakeTextModel,
    ServedApp,
    app_client,
    make_app,
    wait_until,
    wait_until_async,
)

MODEL = "fake-model"
CHAT = [{"role": "user", "content": "hello"}]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    """Every sample as ``{(name, sorted labels): value}``."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    content_type = response.headers.get_list("content-type")
    assert content_type == [CONTENT_TYPE_LATEST], content_type  # one header, one charset (Prometheus 3 parses it)
    params = [p.split("=")[0].strip() for p in content_type[0].split(";")[1:]]
    assert sorted(params) == sorted(set(params)) and "charset" in params
    out: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_text_traffic_moves_counters_and_histograms_by_the_usage() -> None:
    app = make_app([FakeBackendPlugin()])
    async with app_client(app) as client:
        before = await scrape(client)
        assert value(before, "flexserv:num_requests_running", model_name=MODEL) == 0
        usages: list[dict[str, int]] = []
        r = await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 7})
        usages.append(r.json()["usage"])
        r = await client.post("/v1/completions", json={"prompt": "abc", "max_tokens": 5, "n": 2})
        usages.append(r.json()["usage"])
        r = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 50, "stop": ["brown"]})
        assert r.json()["choices"][0]["finish_reason"] == "stop"
        usages.append(r.json()["usage"])
        lines = []
        async with client.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": CHAT, "max_tokens": 9, "stream": True, "stream_options": {"include_usage": True}},
        ) as stream:
            async for line in stream.aiter_lines():
                lines.append(line)
        usages.append(next(json_usage for json_usage in _usages(lines)))
        assert (await client.post("/v1/chat/completions", json={"model": "nope", "messages": CHAT})).status_code == 404
        after = await scrape(client)

    prompt = sum(u["prompt_tokens"] for u in usages)
    generated = sum(u["completion_tokens"] for u in usages)
    assert value(after, "flexserv:prompt_tokens_total", model_name=MODEL) == prompt
    assert value(after, "flexserv:generation_tokens_total", model_name=MODEL) == generated == 7 + 10 + 15 + 9
    # 5 sequences: 4 ran to max_tokens, 1 hit its stop string
    assert value(after, "flexserv:request_success_total", model_name=MODEL, finished_reason="length") == 4
    assert value(after, "flexserv:request_success_total", model_name=MODEL, finished_reason="stop") == 1
    for histogram in ("time_to_first_token", "e2e_request_latency", "request_queue_time"):
        assert value(after, f"flexserv:{histogram}_seconds_count", model_name=MODEL) == 4, histogram
    # inter-token gaps: tokens - 1 per sequence
    assert value(after, "flexserv:inter_token_latency_seconds_count", model_name=MODEL) == (7 - 1) + 2 * (5 - 1) + (
        15 - 1
    ) + (9 - 1)
    # the first request waited for the load: its queue time is in the sum
    assert value(after, "flexserv:request_queue_time_seconds_sum", model_name=MODEL) > 0
    chat = {"route": "/v1/chat/completions", "method": "POST"}
    assert value(after, "flexserv:http_requests_total", **chat, status="200") == 2
    assert value(after, "flexserv:http_requests_total", **chat, status="404") == 1
    assert value(after, "flexserv:http_requests_total", route="/metrics", method="GET", status="200") == 1
    assert value(after, "flexserv:model_loads_total", model_name=MODEL, kind="text", result="success") == 1
    assert value(after, "flexserv:model_load_duration_seconds_count", model_name=MODEL, kind="text") == 1
    assert value(after, "flexserv:model_loaded", model_name=MODEL, kind="text") == 1
    assert value(after, "flexserv:num_requests_running", model_name=MODEL) == 0


def _usages(lines: list[str]) -> list[dict[str, int]]:
    import json

    out = []
    for line in lines:
        if line.startswith("data: {"):
            usage = json.loads(line[6:]).get("usage")
            if usage:
                out.append(usage)
    return out


async def test_unload_eviction_and_failed_load_are_counted_by_reason() -> None:
    app = make_app([FakeBackendPlugin()], settings={"model_timeout": 0.2})
    async with app_client(app) as client:
        await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 1})
        await client.post("/v1/flexserv/models/unload", json={"model_id": MODEL})
        await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 1})

        async def evicted() -> Samples | None:  # the TTL loop checks every 0.05 s
            samples = await scrape(client)
            return (
                samples
                if value(samples, "flexserv:model_evictions_total", model_name=MODEL, kind="text", reason="ttl")
                else None
            )

        samples = await wait_until_async(evicted, message="the TTL evicted the model")
    assert value(samples, "flexserv:model_unloads_total", model_name=MODEL, kind="text", reason="manual") == 1
    assert value(samples, "flexserv:model_evictions_total", model_name=MODEL, kind="text", reason="ttl") == 1
    assert value(samples, "flexserv:model_loads_total", model_name=MODEL, kind="text", result="success") == 2

    broken = make_app([FakeBackendPlugin(fail="no weights")])
    async with app_client(broken) as client:
        assert (await client.post("/v1/chat/completions", json={"messages": CHAT})).status_code >= 400
        samples = await scrape(client)
    assert value(samples, "flexserv:model_loads_total", model_name=MODEL, kind="text", result="failure") == 1
    assert value(samples, "flexserv:model_load_duration_seconds_count", model_name=MODEL, kind="text") == 0


async def test_each_app_has_its_own_registry() -> None:
    first, second = make_app([FakeBackendPlugin()]), make_app([FakeBackendPlugin()])
    async with app_client(first) as a, app_client(second) as b:
        await a.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 3})
        assert value(await scrape(a), "flexserv:generation_tokens_total", model_name=MODEL) == 3
        assert value(await scrape(b), "flexserv:generation_tokens_total", model_name=MODEL) == 0


class StatsModel(FakeTextModel):
    """A fake whose engine reports a queue, a KV cache and a prefix cache."""

    def stats(self) -> EngineStats:
        return EngineStats(
            requests_waiting=1,
            kv_cache_usage=0.25,
            kv_cache_resident=0.5,
            prefix_cache_queries=64,
            prefix_cache_hits=48,
            preemptions=2,
            spec_decode_draft_tokens=30,
            spec_decode_accepted_tokens=21,
            micro_batches=3,
            micro_batch_items=40,
        )


class StatsBackend(FakeTextBackend):
    def load(self, spec: Any, progress: Any) -> FakeTextModel:
        return StatsModel(spec, token_delay=0.05)


async def test_engine_stats_are_exported_and_queued_requests_count_as_waiting() -> None:
    plugin = FakeBackendPlugin()
    plugin.backend = StatsBackend()
    app = make_app([plugin])
    async with app_client(app) as client:
        long = asyncio.create_task(client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 40}))
        other = asyncio.create_task(client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 40}))

        async def serving() -> Samples | None:
            samples = await scrape(client)
            return samples if value(samples, "flexserv:num_requests_running", model_name=MODEL) >= 1 else None

        samples = await wait_until_async(serving, message="the requests hold the model")
        await asyncio.gather(long, other)
    # two requests hold the model, and its engine says one of them is queued
    assert value(samples, "flexserv:num_requests_running", model_name=MODEL) == 1
    assert value(samples, "flexserv:num_requests_waiting", model_name=MODEL) == 1
    assert value(samples, "flexserv:kv_cache_usage_perc", model_name=MODEL) == 0.25
    assert value(samples, "flexserv:kv_cache_resident_perc", model_name=MODEL) == 0.5
    assert value(samples, "flexserv:prefix_cache_queries_total", model_name=MODEL) == 64
    assert value(samples, "flexserv:prefix_cache_hits_total", model_name=MODEL) == 48
    assert value(samples, "flexserv:num_preemptions_total", model_name=MODEL) == 2
    assert value(samples, "flexserv:spec_decode_num_draft_tokens_total", model_name=MODEL) == 30
    assert value(samples, "flexserv:spec_decode_num_accepted_tokens_total", model_name=MODEL) == 21
    assert value(samples, "flexserv:micro_batches_total", model_name=MODEL) == 3
    assert value(samples, "flexserv:micro_batch_items_total", model_name=MODEL) == 40


class CollectorPlugin:
    def __init__(self) -> None:
        self.counter = Counter("flexserv:myplugin_things", "Things my plugin did.", registry=None)

    @hookimpl
    def flexserv_metrics_collectors(self, settings: Any) -> list[Any]:
        return [self.counter]


async def test_plugin_collectors_are_scraped_and_a_clash_names_the_plugin() -> None:
    plugin = CollectorPlugin()
    plugin.counter.inc(3)
    async with app_client(make_app([FakeBackendPlugin(), plugin])) as client:
        assert value(await scrape(client), "flexserv:myplugin_things_total") == 3

    class Clash:
        @hookimpl
        def flexserv_metrics_collectors(self, settings: Any) -> list[Any]:
            return [Counter("flexserv:prompt_tokens", "Taken by the core.", registry=None)]

    with pytest.raises(PluginHookError, match="Clash") as info:
        make_app([Clash()])
    assert "flexserv_metrics_collectors" in str(info.value)


@pytest.mark.slow
def test_running_gauge_returns_to_zero_after_a_disconnect_storm() -> None:
    """20 streams closed by their clients mid-way over a real socket."""
    fake = FakeBackendPlugin(token_delay=0.01)
    app = make_app([fake])
    with ServedApp(app) as base_url, httpx.Client(base_url=base_url, timeout=30) as client:
        body = {"messages": CHAT, "max_tokens": 2000, "stream": True}

        async def one() -> None:
            async with (
                httpx.AsyncClient(base_url=base_url, timeout=30) as ac,
                ac.stream("POST", "/v1/chat/completions", json=body) as stream,
            ):
                seen = 0
                async for _line in stream.aiter_lines():
                    seen += 1
                    if seen >= 10:
                        break  # leaving the block closes the connection mid-stream

        async def storm() -> None:
            await asyncio.gather(*(one() for _ in range(20)))

        asyncio.run(storm())

        def settled() -> Samples | None:
            samples = _parse(client.get("/metrics").text)
            running = value(samples, "flexserv:num_requests_running", model_name=MODEL)
            aborted = value(samples, "flexserv:request_success_total", model_name=MODEL, finished_reason="abort")
            return samples if running == 0 and aborted == 20 else None

        samples = wait_until(settled, interval=0.05, message="all 20 streams aborted")
    assert value(samples, "flexserv:num_requests_running", model_name=MODEL) == 0
    assert value(samples, "flexserv:num_requests_waiting", model_name=MODEL) == 0
    assert value(samples, "flexserv:request_success_total", model_name=MODEL, finished_reason="abort") == 20
    assert value(samples, "flexserv:e2e_request_latency_seconds_count", model_name=MODEL) == 20
    generated = value(samples, "flexserv:generation_tokens_total", model_name=MODEL)
    assert 20 * 3 <= generated < 20 * 2000  # each got some tokens out, none ran to the end


def _parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_a_caller_reported_oom_unload_is_reported_and_counted_as_an_oom_eviction(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with app_client(make_app([FakeBackendPlugin()])) as client:
        await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 1})
        with caplog.at_level(logging.WARNING):
            r = await client.post("/v1/flexserv/models/unload", json={"model_id": MODEL, "oom_triggered": True})
        assert r.status_code == 200, r.text
        assert r.json()["oom_triggered"] is True
        assert [u["model_id"] for u in r.json()["unloaded"]] == [MODEL]
        samples = await scrape(client)
        assert value(samples, "flexserv:model_evictions_total", model_name=MODEL, kind="text", reason="oom") == 1
        assert value(samples, "flexserv:model_unloads_total", model_name=MODEL, kind="text", reason="manual") == 0
        assert any("reason oom" in rec.getMessage() and "oom_triggered" in rec.getMessage() for rec in caplog.records)
        plain = await client.post("/v1/flexserv/models/unload", json={"model_id": MODEL})
        assert plain.json()["oom_triggered"] is False
        bad = await client.post("/v1/flexserv/models/unload", json={"oom_triggered": "yes"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "oom_triggered"


async def test_the_end_of_sequence_token_is_not_a_generated_token() -> None:
    """As the usage counts them: a model that ends after 4 tokens with an
    end-of-sequence token generated 4, streamed or not."""
    async with app_client(make_app([FakeBackendPlugin(eos_after=4)])) as client:
        r = await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 10})
        assert r.json()["choices"][0]["finish_reason"] == "stop"
        assert r.json()["usage"]["completion_tokens"] == 4
        lines = []
        async with client.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": CHAT, "max_tokens": 10, "stream": True, "stream_options": {"include_usage": True}},
        ) as stream:
            async for line in stream.aiter_lines():
                lines.append(line)
        assert _usages(lines)[0]["completion_tokens"] == 4
        samples = await scrape(client)
    assert value(samples, "flexserv:generation_tokens_total", model_name=MODEL) == 8
    assert value(samples, "flexserv:request_success_total", model_name=MODEL, finished_reason="stop") == 2


async def test_each_text_request_logs_its_model_tokens_duration_and_outcome(caplog: pytest.LogCaptureFixture) -> None:
    app = make_app([FakeBackendPlugin()])
    async with app_client(app) as client:
        with caplog.at_level(logging.INFO, logger="flexserv_core.metrics.text"):
            r = await client.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4})
            usage = r.json()["usage"]
            stream = {"prompt": "hi", "max_tokens": 50, "stream": True}
            async with client.stream("POST", "/v1/completions", json=stream) as s:
                assert s.status_code == 200
                async for _ in s.aiter_lines():
                    pass
    lines = [r.getMessage() for r in caplog.records if r.name == "flexserv_core.metrics.text"]
    assert len(lines) == 2, lines
    chat = lines[0]
    assert chat.startswith(f"text request done: model {MODEL}, {usage['prompt_tokens']} prompt + 4 completion tokens")
    assert "finish length" in chat and " s (first token " in chat
    assert lines[1].startswith(f"text request done: model {MODEL}, ") and "+ 50 completion tokens" in lines[1]
