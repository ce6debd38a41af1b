"""A real FlexServ server on loopback serving the embedded SmolLM2 GGUF through
llama.cpp, driven by the official ``openai`` SDK."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from flexserv_core.testing import ServedApp, make_app, wait_until_async

pytestmark = pytest.mark.slow

MODEL = "smol"
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
NEVER_STOP = {"2": -100, "0": -100}  # SmolLM2's end-of-turn and end-of-text: banned


def serve(gguf: Path, **settings: Any) -> tuple[ServedApp, Any]:
    app = make_app(
        ["llamacpp", "responses", "tool-parsers", "constraints"],
        settings={
            "model": [f"{MODEL}={gguf}"],
            "llamacpp_context_length": 2048,
            "llamacpp_kv_cache_tokens": 8192,
            "llamacpp_parallel": 8,
            "llamacpp_threads": 1,  # see conftest.load
            **settings,
        },
    )
    return ServedApp(app), app


@pytest.fixture(scope="module")
def server(smollm_gguf: Path) -> Iterator[tuple[str, Any]]:
    served, app = serve(smollm_gguf)
    with served as url:
        yield url, app


def sdk(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=120)


def engine(app: Any) -> Any:
    return app.state.flexserv.registry.model_if_loaded(MODEL).engine


async def test_chat_streaming_completions_and_models(server: tuple[str, Any]) -> None:
    url, _ = server
    async with sdk(url) as client:
        full = await client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=10, temperature=0)
        assert "Paris" in (full.choices[0].message.content or "")
        assert full.usage and 0 < full.usage.completion_tokens <= 10
        stream = await client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=10, temperature=0, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == full.choices[0].message.content
        completion = await client.completions.create(
            model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0
        )
        assert completion.choices[0].text.strip()
        models = {m.id: m for m in (await client.models.list()).data}
        assert models[MODEL].model_extra and models[MODEL].model_extra.get("max_model_len") == 2048


async def test_responses_api(server: tuple[str, Any]) -> None:
    url, _ = server
    async with sdk(url) as client:
        response = await client.responses.create(
            model=MODEL, input=QUESTION[0]["content"], max_output_tokens=12, temperature=0
        )
        assert "Paris" in response.output_text


async def test_n_stop_and_logprobs(server: tuple[str, Any]) -> None:
    url, _ = server
    async with sdk(url) as client:
        many = await client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=8, temperature=1.0, seed=3, n=3
        )
        assert len(many.choices) == 3 and {c.index for c in many.choices} == {0, 1, 2}
        again = await client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=8, temperature=1.0, seed=3, n=3
        )
        assert [c.message.content for c in again.choices] == [c.message.content for c in many.choices]
        story = await client.completions.create(
            model=MODEL, prompt="1, 2, 3, 4, 5,", max_tokens=30, temperature=0, stop=[" 8"]
        )
        assert story.choices[0].finish_reason == "stop" and " 8" not in story.choices[0].text
        assert "7" in story.choices[0].text
        scored = await client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
        )
        content = scored.choices[0].logprobs.content  # type: ignore[union-attr]
        assert content and len(content) == 4
        for entry in content:
            assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
            assert entry.top_logprobs[0].logprob >= entry.logprob - 1e-6  # greedy: the best is chosen
        penalised = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Repeat the word cat ten times."}],
            max_tokens=24,
            temperature=0,
            frequency_penalty=2.0,
            presence_penalty=2.0,
        )
        plain = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Repeat the word cat ten times."}],
            max_tokens=24,
            temperature=0,
        )
        assert penalised.choices[0].message.content != plain.choices[0].message.content


async def test_concurrent_requests_are_batched_and_share_the_prefix(server: tuple[str, Any]) -> None:
    url, app = server
    system = {"role": "system", "content": "You are a terse assistant for a bakery. " * 6}
    async with sdk(url) as client:
        await client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1)  # loaded
        before = engine(app).stats()
        questions = [f"Question {i}: do you sell bread number {i}?" for i in range(6)]
        await asyncio.gather(
            *(
                client.chat.completions.create(
                    model=MODEL,
                    messages=[system, {"role": "user", "content": q}],
                    max_tokens=12,
                    temperature=0,
                    logit_bias=NEVER_STOP,
                )
                for q in questions
            )
        )
        after = engine(app).stats()
    assert after["multi_sequence_steps"] > before["multi_sequence_steps"]
    assert after["peak_step_sequences"] >= 3
    assert after["prompt_tokens_reused"] - before["prompt_tokens_reused"] >= 5 * 40  # the system prompt, 5 times


async def test_bad_parameters_are_openai_errors(server: tuple[str, Any]) -> None:
    url, _ = server
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        r = await client.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": QUESTION, "max_tokens": 4, "logit_bias": {"999999": 5}},
        )
        assert r.status_code == 400 and r.json()["error"]["param"].startswith("logit_bias")
        r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, "max_tokens": 5000})
        assert r.status_code == 400


async def test_disconnect_cancels_and_unload_frees_memory(server: tuple[str, Any]) -> None:
    import psutil

    url, app = server
    async with sdk(url) as client:
        stream = await client.completions.create(
            model=MODEL,
            prompt="Write a long story.",
            max_tokens=1500,
            temperature=0,
            stream=True,
            logit_bias=NEVER_STOP,
        )
        seen = 0
        async for _chunk in stream:
            seen += 1
            if seen == 3:
                break
        await stream.close()
    await wait_until_async(lambda: engine(app).stats()["running"] == 0, 10, message="the stream was cancelled")
    assert app.state.flexserv.registry.active_requests == 0

    model = app.state.flexserv.registry.model_if_loaded(MODEL)
    # the KV cache (SmolLM2-135M: 11,520 values per token, 2 bytes each in f16) and the weights
    assert model.runtime.kv_cache_type == "f16"
    footprint = model.engine.cells * 11520 * 2 + os.path.getsize(model.spec.source)
    rss_loaded = psutil.Process().memory_info().rss
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        r = await client.post("/v1/flexserv/models/unload", json={"model_id": MODEL})
        assert r.status_code == 200
        await wait_until_async(
            lambda: app.state.flexserv.registry.model_if_loaded(MODEL) is None and model.runtime is None,
            30,
            message="the model was unloaded",
        )
        time.sleep(0.2)
        rss_unloaded = psutil.Process().memory_info().rss
        # the KV cache and the mapped weights are gone (most of them: the allocator keeps a little)
        assert rss_loaded - rss_unloaded > 0.7 * footprint, (rss_loaded, rss_unloaded, footprint)
        # and the model comes back on the next request
        r = await client.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 2})
        assert r.status_code == 200


def test_a_full_queue_is_a_429_with_retry_after(smollm_gguf: Path) -> None:
    served, _ = serve(smollm_gguf, llamacpp_parallel=1, llamacpp_max_queued_requests=0)
    with served as url, httpx.Client(base_url=url, timeout=120) as client:
        assert client.post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 1}).status_code == 200

        async def race() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=120) as ac:
                body = {"model": MODEL, "prompt": "Tell a story", "max_tokens": 200, "logit_bias": NEVER_STOP}
                return list(await asyncio.gather(*(ac.post("/v1/completions", json=body) for _ in range(3))))

        responses = asyncio.run(race())
        codes = sorted(r.status_code for r in responses)
        refused = [r for r in responses if r.status_code == 429]
        assert codes.count(200) >= 1 and 429 in codes
        assert refused and int(refused[0].headers["Retry-After"]) >= 1
        assert refused[0].json()["error"]["type"]


def test_a_missing_quantization_names_the_ones_present(smollm_gguf: Path, tmp_path: Path) -> None:
    for quant in ("Q4_1", "Q8_0"):
        (tmp_path / f"smol.{quant}.gguf").symlink_to(smollm_gguf)
    app = make_app(["llamacpp"], settings={"model": [f"good={tmp_path}:q8_0", f"bad={tmp_path}:Q5_K_M"]})
    with ServedApp(app) as url, httpx.Client(base_url=url, timeout=120) as client:
        ok = client.post("/v1/completions", json={"model": "good", "prompt": "Hi", "max_tokens": 2})
        assert ok.status_code == 200
        bad = client.post("/v1/completions", json={"model": "bad", "prompt": "Hi", "max_tokens": 2})
        assert bad.status_code >= 400
        message = bad.json()["error"]["message"]
        assert "no Q5_K_M GGUF file" in message and "Q4_1, Q8_0" in message


async def test_constrained_output_parse_and_a_required_tool_call(server: tuple[str, Any]) -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    url, _ = server
    async with sdk(url) as client:
        parsed = await client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": "Describe Paris as JSON with name and country."}],
            response_format=City,
            max_tokens=60,
            temperature=0,
        )
        city = parsed.choices[0].message.parsed
        assert isinstance(city, City) and city.name
        tool = {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
        called = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[tool],  # type: ignore[list-item]
            tool_choice="required",
            max_tokens=60,
            temperature=0,
        )
        calls = called.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather"  # type: ignore[union-attr]
        assert "city" in calls[0].function.arguments  # type: ignore[union-attr]
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Give a JSON object with a key a."}],
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "a",
                    "schema": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}},
                        "required": ["a"],
                        "additionalProperties": False,
                    },
                },
            },
            max_tokens=40,
            temperature=0,
            stream=True,
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        import json

        assert isinstance(json.loads(text)["a"], int)


# --- vLLM's sampling extensions and guided_* fields --------------------------------------

REPETITIVE = "apple, apple, apple, apple, apple, apple,"


async def test_top_k_1_and_min_p_1_are_greedy(server: tuple[str, Any]) -> None:
    url, _ = server
    prompt = "The best thing about Paris is"
    async with sdk(url) as client:

        async def text(**kwargs: Any) -> str:
            r = await client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, **kwargs)
            return r.choices[0].text

        greedy = await text(temperature=0)
        hot = [await text(temperature=1.5, seed=seed) for seed in (1, 2)]
        assert any(t != greedy for t in hot)  # a seeded hot draw wanders off the greedy path...
        for extra in ({"top_k": 1}, {"min_p": 1.0}):  # ...unless only the best token is left
            for seed in (1, 2):
                assert await text(temperature=1.5, seed=seed, extra_body=extra) == greedy, extra


async def test_min_tokens_and_ignore_eos_generate_past_the_end(server: tuple[str, Any]) -> None:
    url, _ = server
    async with sdk(url) as client:
        plain = await client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=40, temperature=0)
        assert plain.choices[0].finish_reason == "stop" and plain.usage and plain.usage.completion_tokens < 10
        held = await client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=40, temperature=0, extra_body={"min_tokens": 20}
        )
        assert held.usage and held.usage.completion_tokens >= 20
        forever = await client.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            max_tokens=20,
            temperature=0,
            extra_body={"min_tokens": 20, "ignore_eos": True},
        )
        assert forever.usage and forever.usage.completion_tokens == 20
        assert forever.choices[0].finish_reason == "length"


async def test_repetition_penalty_breaks_a_loop(server: tuple[str, Any]) -> None:
    url, _ = server
    async with sdk(url) as client:

        async def text(**extra: Any) -> str:
            r = await client.completions.create(
                model=MODEL, prompt=REPETITIVE, max_tokens=10, temperature=0, extra_body=extra or None
            )
            return r.choices[0].text

        plain = await text()
        assert plain.count("apple") >= 4  # greedy continues the loop
        penalised = await text(repetition_penalty=2.0)
        assert "apple" not in penalised  # the prompt's tokens count from the first token on
        assert await text(repetition_penalty=1.0) == plain


async def test_guided_fields_constrain_the_output(server: tuple[str, Any]) -> None:
    import json
    import re

    url, _ = server
    async with sdk(url) as client:
        choice = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Is the sky blue?"}],
            max_tokens=5,
            extra_body={"guided_choice": ["yes", "no"]},
        )
        assert choice.choices[0].message.content in ("yes", "no")
        grammar = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Is the sky blue?"}],
            max_tokens=5,
            extra_body={"guided_grammar": 'start: "Yes, sir" | "No, sir"'},
        )
        assert grammar.choices[0].message.content in ("Yes, sir", "No, sir")
        regex = await client.completions.create(
            model=MODEL, prompt="My phone number is", max_tokens=12, extra_body={"guided_regex": r" \d{3}-\d{4}"}
        )
        assert re.fullmatch(r" \d{3}-\d{4}", regex.choices[0].text), regex.choices[0].text
        schema = {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "sunny": {"type": "boolean"}},
            "required": ["city", "sunny"],
            "additionalProperties": False,
        }
        out = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Describe the weather in Paris as JSON."}],
            max_tokens=40,
            temperature=0,
            extra_body={"guided_json": json.dumps(schema)},
        )
        data = json.loads(out.choices[0].message.content or "")
        assert set(data) == {"city", "sunny"} and isinstance(data["sunny"], bool)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model=MODEL, messages=QUESTION, max_tokens=10, extra_body={"min_p": 1.5}
            )
        assert info.value.body["param"] == "min_p"  # type: ignore[index]


# --- constrained decoding: Responses text.format and named tool_choice ----------------

CITY_FORMAT = {
    "type": "json_schema",
    "name": "city",
    "schema": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20}},
        "required": ["name", "country"],
        "additionalProperties": False,
    },
    "strict": True,
}


async def test_responses_text_format_json_schema_also_streamed(server: tuple[str, Any]) -> None:
    import json

    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    url, _ = server
    prompt = "Describe Paris as JSON with name and country."
    async with sdk(url) as client:
        plain = await client.responses.create(
            model=MODEL, input=prompt, text={"format": CITY_FORMAT}, max_output_tokens=60, temperature=0
        )
        data = json.loads(plain.output_text)
        assert set(data) == {"name", "country"}
        events = []
        stream = await client.responses.create(
            model=MODEL, input=prompt, text={"format": CITY_FORMAT}, max_output_tokens=60, temperature=0, stream=True
        )
        async for event in stream:
            events.append(event)
        deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert json.loads(deltas) == data  # greedy: the same object, delivered in pieces
        assert events[-1].type == "response.completed"
        parsed = await client.responses.parse(
            model=MODEL, input=prompt, text_format=City, max_output_tokens=60, temperature=0
        )
        assert isinstance(parsed.output_parsed, City) and parsed.output_parsed.name


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "maxLength": 30}},
            "required": ["timezone"],
        },
    },
}


async def test_a_named_tool_choice_calls_that_tool_also_streamed(server: tuple[str, Any]) -> None:
    import json

    url, _ = server
    # the question is about the weather: a named choice of the other tool must still call it
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER, TIME],
        "tool_choice": {"type": "function", "function": {"name": "get_time"}},
        "max_tokens": 60,
        "temperature": 0,
    }
    async with sdk(url) as client:
        called = await client.chat.completions.create(**request)
        message = called.choices[0].message
        assert message.tool_calls and len(message.tool_calls) == 1
        call = message.tool_calls[0]
        assert call.function.name == "get_time"
        arguments = json.loads(call.function.arguments)
        assert set(arguments) == {"timezone"} and isinstance(arguments["timezone"], str)
        assert called.choices[0].finish_reason in ("stop", "tool_calls")

        stream = await client.chat.completions.create(**request, stream=True)
        names, pieces, finishes = [], [], []
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.finish_reason:
                    finishes.append(choice.finish_reason)
                for delta in choice.delta.tool_calls or []:
                    if delta.function and delta.function.name:
                        names.append(delta.function.name)
                    if delta.function and delta.function.arguments:
                        pieces.append(delta.function.arguments)
        assert names == ["get_time"]
        assert json.loads("".join(pieces)) == arguments
        assert finishes == [called.choices[0].finish_reason]
