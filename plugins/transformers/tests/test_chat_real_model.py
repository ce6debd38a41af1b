"""The text API with the real embedded model (SmolLM2-135M-Instruct), over ASGI.

One app (and one model load) for the module; greedy decoding and few tokens.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from flexserv_transformers.testing import SMOLLM2_MISSING

from flexserv_core import ModelKind
from flexserv_core.testing import make_app, openai_client, running_app_client

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def real(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Any, Any]]:
    """``(app, sdk)``: the transformers backend and its embedded default model."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Shared with the other real-model module of this session: the GGUF is converted once.
    cache = os.environ.get("FLEXSERV_CACHE_DIR") or str(tmp_path_factory.getbasetemp() / "flexserv-cache")
    app = make_app(["transformers"], settings={"cache_dir": cache})
    if app.state.flexserv.catalog.default(ModelKind.TEXT) is None:
        pytest.fail(SMOLLM2_MISSING)
    # A module-scoped fixture's teardown runs in another task than its setup.
    async with running_app_client(app) as client:
        yield app, openai_client(client)


def tokenizer_of(app: Any) -> Any:
    server = app.state.flexserv
    model = server.registry.model_if_loaded(server.catalog.default(ModelKind.TEXT).name)
    return model.tokenizer


async def test_chat_answers_paris_streaming_and_not_alike(real: tuple[Any, Any]) -> None:
    app, sdk = real
    full = await sdk.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=QUESTION, max_tokens=12, temperature=0
    )
    text = full.choices[0].message.content
    assert "Paris" in text
    stream = await sdk.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=QUESTION,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[-1].usage.model_dump() == full.usage.model_dump()

    tokenizer = tokenizer_of(app)
    prompt_ids = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert full.usage.prompt_tokens == len(prompt_ids)
    if full.choices[0].finish_reason == "stop":  # ended by end-of-sequence, which is not counted
        assert full.usage.completion_tokens == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    else:
        assert full.usage.completion_tokens == 12
    assert full.usage.total_tokens == full.usage.prompt_tokens + full.usage.completion_tokens


async def test_stop_string_and_logprobs_with_real_tokens(real: tuple[Any, Any]) -> None:
    _app, sdk = real
    r = await sdk.chat.completions.create(
        model="SmolLM2-135M-Instruct",
        messages=QUESTION,
        max_tokens=12,
        temperature=0,
        stop=["Paris"],
        logprobs=True,
        top_logprobs=3,
    )
    choice = r.choices[0]
    assert "Paris" not in choice.message.content and choice.finish_reason == "stop"
    content = choice.logprobs.content
    # Tokens are reported up to the one the stop string starts in (here " Paris",
    # whose " " is the last character of the content).
    joined = "".join(t.token for t in content)
    assert joined.startswith(choice.message.content)
    assert "".join(t.token for t in content[:-1]) in choice.message.content
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        tops = [a.logprob for a in t.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert t.logprob == pytest.approx(tops[0], abs=1e-4)  # greedy picks the most likely token


async def test_completions_length_and_stream_parity(real: tuple[Any, Any]) -> None:
    app, sdk = real
    prompt = "The three primary colors are"
    full = await sdk.completions.create(model="SmolLM2-135M-Instruct", prompt=prompt, max_tokens=6, temperature=0)
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 6
    assert full.usage.prompt_tokens == len(tokenizer_of(app)(prompt)["input_ids"])
    stream = await sdk.completions.create(
        model="SmolLM2-135M-Instruct", prompt=prompt, max_tokens=6, temperature=0, stream=True
    )
    assert "".join([c.choices[0].text async for c in stream if c.choices]) == full.choices[0].text
