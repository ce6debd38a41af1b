"""``POST /v1/completions`` with the deterministic fake backend, through the official SDK."""

from __future__ import annotations

from typing import Any

from flexserv_core.api.text_generation import SampledToken
from flexserv_core.api.text_logprobs import completion_logprobs
from flexserv_core.backends.base import TopLogprob
from flexserv_core.testing.fakes import FAKE_SCRIPT, FakeBackendPlugin


async def test_string_prompt(flexserv_openai: Any) -> None:
    r = await flexserv_openai.completions.create(model="fake-model", prompt="Once upon", max_tokens=7)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == "fake-model"
    assert [(c.index, c.text, c.finish_reason) for c in r.choices] == [(0, FAKE_SCRIPT[:7], "length")]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (9, 7, 16)


async def test_prompt_lists_and_n_number_choices_prompt_major(flexserv_openai: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_openai.completions.create(model="fake-model", prompt=["ab", "cde"], max_tokens=3, n=2, seed=7)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert all(c.text == "The" for c in r.choices)
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (5, 12)
    # Seeds are per choice of a prompt: (7, 8) for each prompt.
    assert sorted(p.seed for p in fake.backend.models[0].params_log) == [7, 7, 8, 8]


async def test_token_id_prompts(flexserv_openai: Any) -> None:
    r = await flexserv_openai.completions.create(model="fake-model", prompt=[72, 105], max_tokens=2, echo=True)
    assert r.choices[0].text == "Hi" + "Th" and r.usage.prompt_tokens == 2
    r = await flexserv_openai.completions.create(model="fake-model", prompt=[[72], [72, 105, 33]], max_tokens=1)
    assert [c.text for c in r.choices] == ["T", "T"] and r.usage.prompt_tokens == 4


async def test_echo(flexserv_openai: Any) -> None:
    r = await flexserv_openai.completions.create(model="fake-model", prompt="Say: ", max_tokens=3, echo=True)
    assert r.choices[0].text == "Say: The"
    stream = await flexserv_openai.completions.create(
        model="fake-model", prompt="Say: ", max_tokens=3, echo=True, stream=True
    )
    assert "".join([c.choices[0].text async for c in stream if c.choices]) == "Say: The"


async def test_streaming_matches_non_streaming_with_stop_and_usage(flexserv_openai: Any) -> None:
    kwargs: dict[str, Any] = {"model": "fake-model", "prompt": ["x", "y"], "max_tokens": 30, "stop": [" b", "zz"]}
    full = await flexserv_openai.completions.create(**kwargs)
    assert [c.text for c in full.choices] == ["The quick", "The quick"]
    assert [c.finish_reason for c in full.choices] == ["stop", "stop"]
    stream = await flexserv_openai.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    texts = {0: "", 1: ""}
    finishes = {}
    for c in chunks[:-1]:
        (choice,) = c.choices
        texts[choice.index] += choice.text
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
    assert texts == {0: "The quick", 1: "The quick"} and finishes == {0: "stop", 1: "stop"}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert full.usage.completion_tokens == 2 * len("The quick b")


def test_completion_top_logprobs_hold_the_sampled_token() -> None:
    """Sampled at a temperature, a token may be outside the top ``logprobs``: OpenAI's
    legacy API still lists it (up to ``logprobs + 1`` entries)."""
    sampled = SampledToken(text=" not", logprob=-2.5, top=[TopLogprob(token_id=1, token=" Paris", logprob=-1.4)])
    usual = SampledToken(text=" Paris", logprob=-1.4, top=[TopLogprob(token_id=1, token=" Paris", logprob=-1.4)])
    lp = completion_logprobs([sampled, usual], offset=0, top=1)
    assert lp.top_logprobs == [{" Paris": -1.4, " not": -2.5}, {" Paris": -1.4}]


async def test_logprobs_shape(flexserv_openai: Any) -> None:
    r = await flexserv_openai.completions.create(model="fake-model", prompt="p", max_tokens=3, logprobs=2, echo=False)
    lp = r.choices[0].logprobs
    assert lp.tokens == ["T", "h", "e"]
    assert lp.token_logprobs == [-0.5, -0.5, -0.5]
    assert lp.top_logprobs == [{"T": -0.5, "a": -1.0}, {"h": -0.5, "a": -1.0}, {"e": -0.5, "a": -1.0}]
    assert lp.text_offset == [0, 1, 2]
    r = await flexserv_openai.completions.create(model="fake-model", prompt="p", max_tokens=2, logprobs=0)
    assert r.choices[0].logprobs.token_logprobs == [-0.5, -0.5] and r.choices[0].logprobs.top_logprobs is None
    r = await flexserv_openai.completions.create(model="fake-model", prompt="p", max_tokens=2)
    assert r.choices[0].logprobs is None


async def test_streamed_logprobs_offsets_are_continuous(flexserv_openai: Any) -> None:
    stream = await flexserv_openai.completions.create(
        model="fake-model", prompt="p", max_tokens=12, logprobs=1, stream=True, stop="quick"
    )
    tokens: list[str] = []
    offsets: list[int] = []
    async for c in stream:
        if c.choices and c.choices[0].logprobs:
            tokens += c.choices[0].logprobs.tokens
            offsets += c.choices[0].logprobs.text_offset
    assert "".join(tokens) == "The "
    assert offsets == [0, 1, 2, 3]
