"""``POST /v1/chat/completions`` with the deterministic fake backend, through the official SDK."""

from __future__ import annotations

import asyncio
from typing import Any

from flexserv_core.hookspecs import hookimpl
from flexserv_core.models.spec import ModelKind, ModelSpec
from flexserv_core.testing.app import app_client, make_app, openai_client
from flexserv_core.testing.fakes import FAKE_SCRIPT, FakeBackendPlugin, FakeTextModel

USER = [{"role": "user", "content": "hi"}]
# What FakeTextModel.render_chat makes of USER: "user: hi\nassistant: ", one token per character.
USER_PROMPT_TOKENS = len("user: hi\nassistant: ")


def model_of(fake: FakeBackendPlugin) -> FakeTextModel:
    assert len(fake.backend.models) == 1
    return fake.backend.models[0]


async def test_non_streaming(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=9)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == "fake-model"
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == FAKE_SCRIPT[:9]
    assert choice.finish_reason == "length" and choice.logprobs is None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (
        USER_PROMPT_TOKENS,
        9,
        USER_PROMPT_TOKENS + 9,
    )
    assert model_of(fake).params_log[0].max_tokens == 9


async def test_streaming_matches_non_streaming(flexserv_openai: Any) -> None:
    full = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=12)
    stream = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, max_tokens=12, stream=True
    )
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content == FAKE_SCRIPT[:12]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)  # no include_usage


async def test_sse_wire_format(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/v1/chat/completions",
        json={"messages": USER, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
    events = r.text.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-2])


async def test_include_usage_final_chunk(flexserv_openai: Any) -> None:
    stream = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, max_tokens=5, stream=True, stream_options={"include_usage": True}, n=2
    )
    chunks = [c async for c in stream]
    last = chunks[-1]
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        USER_PROMPT_TOKENS,
        10,
        USER_PROMPT_TOKENS + 10,
    )
    assert all(c.usage is None for c in chunks[:-1])


async def test_n_choices_run_concurrently_with_own_seeds(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, max_tokens=4, n=3, seed=41, temperature=0.7
    )
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.content == FAKE_SCRIPT[:4] for c in r.choices)
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens == USER_PROMPT_TOKENS
    params = model_of(fake).params_log
    assert sorted(p.seed for p in params) == [41, 42, 43]
    assert all(p.temperature == 0.7 for p in params)


async def test_n_streams_interleave_when_tokens_take_time() -> None:
    plugin = FakeBackendPlugin(token_delay=0.01)
    async with app_client(make_app([plugin])) as client:
        stream = await openai_client(client).chat.completions.create(
            model="fake-model", messages=USER, max_tokens=6, n=2, stream=True
        )
        order = [c.choices[0].index async for c in stream if c.choices and c.choices[0].delta.content]
    texts = {i: order.count(i) for i in (0, 1)}
    assert texts == {0: 6, 1: 6}
    # Concurrent, not one after the other: choice 1 produced text before choice 0 finished.
    assert order.index(1) < len(order) - 1 - order[::-1].index(0)


async def test_sampling_parameters_reach_the_model(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    await flexserv_openai.chat.completions.create(
        model="fake-model",
        messages=USER,
        max_completion_tokens=3,
        max_tokens=50,
        temperature=0.2,
        top_p=0.9,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        extra_body={"top_k": 7},
    )
    (p,) = model_of(fake).params_log
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k) == (3, 0.2, 0.9, 7)
    assert (p.presence_penalty, p.frequency_penalty, p.seed) == (0.5, -0.5, None)


async def test_default_max_tokens_fills_the_context(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER)
    assert r.usage.completion_tokens == 4096 - USER_PROMPT_TOKENS
    assert r.choices[0].finish_reason == "length"


async def test_end_of_sequence_is_finish_stop_and_not_counted() -> None:
    async with app_client(make_app([FakeBackendPlugin(eos_after=5)])) as client:
        client_ = openai_client(client)
        r = await client_.chat.completions.create(model="fake-model", messages=USER, max_tokens=20)
        assert r.choices[0].message.content == FAKE_SCRIPT[:5]
        assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 5
        stream = await client_.chat.completions.create(
            model="fake-model", messages=USER, max_tokens=20, stream=True, stream_options={"include_usage": True}
        )
        chunks = [c async for c in stream]
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
        assert chunks[-1].usage.completion_tokens == 5


async def test_stop_string_split_across_tokens(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    # "fox" arrives as the three tokens "f", "o", "x".
    r = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=40, stop="fox")
    assert r.choices[0].message.content == "The quick brown "
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == len("The quick brown fox")
    # The stop closed the model's token iterator: the sequence did not run on to max_tokens.
    assert model_of(fake).tokens_emitted == len("The quick brown fox")
    assert model_of(fake).cancelled_sequences == 1


async def test_stream_never_leaks_a_partial_stop(flexserv_openai: Any) -> None:
    # "brown f" is a prefix of "brown fix": held back until "o" shows it is not a stop;
    # "jumps" is held from its "j" and never sent.
    stream = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, max_tokens=40, stream=True, stop=["brown fix", "jumps"]
    )
    pieces = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
    assert pieces == [*"The quick ", "brown fo", "x", " "]


async def test_logprobs_shape(flexserv_openai: Any) -> None:
    r = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, max_tokens=4, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    assert [t.token for t in content] == list(FAKE_SCRIPT[:4])
    assert all(t.logprob == -0.5 and t.bytes == list(t.token.encode()) for t in content)
    assert [[a.token for a in t.top_logprobs] for t in content[:2]] == [["T", "a", "b"], ["h", "a", "b"]]
    assert [a.logprob for a in content[0].top_logprobs] == [-0.5, -1.0, -2.0]

    r = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=2, logprobs=True)
    assert all(t.top_logprobs == [] for t in r.choices[0].logprobs.content)


async def test_streamed_logprobs_follow_released_text(flexserv_openai: Any) -> None:
    stream = await flexserv_openai.chat.completions.create(
        model="fake-model", messages=USER, max_tokens=30, stream=True, logprobs=True, top_logprobs=1, stop="brown"
    )
    tokens: list[str] = []
    text = ""
    async for c in stream:
        if c.choices and c.choices[0].delta.content:
            tokens += [t.token for t in c.choices[0].logprobs.content]
            text += c.choices[0].delta.content
    assert text == "The quick "
    assert "".join(tokens) == text


class _TemplatePlugin:
    @hookimpl
    def flexserv_chat_template_kwargs(self, model: Any, context: Any) -> dict[str, Any]:
        return {"from_plugin": 1, "shared": "plugin"}


class _FakeWithTemplateOptions(FakeBackendPlugin):
    @hookimpl
    def flexserv_default_models(self, settings: Any) -> list[ModelSpec]:
        options = {"chat_template_kwargs": {"per_model": "m", "shared": "model"}}
        return [ModelSpec(name="fake-model", kind=ModelKind.TEXT, source="fake://", backend="fake", options=options)]


async def test_content_parts_and_template_kwargs_merge() -> None:
    """FakeTextModel renders template kwargs into the prompt, so prompt_tokens (one per
    character) shows which value won: model options < plugin hook. Request-level
    kwargs belong to the template-kwargs plugin; without it they are dropped."""
    app = make_app([_FakeWithTemplateOptions(), _TemplatePlugin()])
    async with app_client(app) as client:
        sdk = openai_client(client)
        r = await sdk.chat.completions.create(model="fake-model", messages=USER, max_tokens=1)
        assert r.usage.prompt_tokens == len("user: hi\nfrom_plugin=1\nper_model=m\nshared=plugin\nassistant: ")
        r = await sdk.chat.completions.create(
            model="fake-model",
            messages=[
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            ],
            max_tokens=1,
            extra_body={
                "chat_template_kwargs": {"shared": "request", "enable_thinking": False},
                "enable_thinking": True,
            },
        )
        prompt = "system: be brief\nuser: ab\nfrom_plugin=1\nper_model=m\nshared=plugin\nassistant: "
        assert r.usage.prompt_tokens == len(prompt)


async def test_unknown_fields_are_dropped_by_default(flexserv_client: Any) -> None:
    r = await flexserv_client.post(
        "/v1/chat/completions", json={"messages": USER, "max_tokens": 2, "tools": [], "not_a_field": 1}
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Th"


async def test_default_model_when_model_is_omitted(flexserv_client: Any) -> None:
    r = await flexserv_client.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 1})
    assert r.status_code == 200 and r.json()["model"] == "fake-model"


async def test_concurrent_requests_keep_their_own_parameters(flexserv_openai: Any) -> None:
    async def ask(k: int, stream: bool) -> str:
        if not stream:
            r = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=k)
            return r.choices[0].message.content
        s = await flexserv_openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=k, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in s if c.choices])

    answers = await asyncio.gather(*(ask(k, k % 2 == 0) for k in range(1, 13)))
    assert answers == [FAKE_SCRIPT[:k] for k in range(1, 13)]
