"""vLLM clients' extensions on chat and completions, on a real loopback server
driven by the official SDK (``extra_body``), with the fake text backend: the
sampling extensions reach the model with vLLM's validation, a backend that does not
implement one refuses it by name, ``guided_*`` map onto structured outputs, and
fields still dropped are named in ``X-FlexServ-Ignored-Fields``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import httpx
import openai
import pytest

from flexserv_core import SAMPLING_EXTENSIONS
from flexserv_core.edge.ignored_fields import MAX_CHARS, header_value
from flexserv_core.testing import ServedApp, make_app
from flexserv_core.testing.fakes import FAKE_SCRIPT, FakeBackendPlugin, FakeTextModel

USER = [{"role": "user", "content": "hi"}]
HEADER = "x-flexserv-ignored-fields"
#: lists every extension (records them; honours min_tokens/ignore_eos); ends after 5 tokens
EXT = "ext-model"
#: the fake's defaults: min_tokens and ignore_eos only
PLAIN = "fake-model"


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, FakeBackendPlugin, FakeBackendPlugin]]:
    ext = FakeBackendPlugin(EXT, backend_name="fake-ext", eos_after=5, sampling_extensions=SAMPLING_EXTENSIONS)
    plain = FakeBackendPlugin(PLAIN)
    with ServedApp(make_app([ext, plain])) as url:
        yield url, ext, plain


@pytest.fixture
def sdk(served: tuple[str, Any, Any]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served[0]}/v1", api_key="x", max_retries=0, timeout=30) as client:
        yield client


def last_params(plugin: FakeBackendPlugin) -> Any:
    model: FakeTextModel = plugin.backend.models[-1]
    return model.params_log[-1]


EXTENSIONS = {"top_k": 5, "min_p": 0.25, "repetition_penalty": 1.3, "min_tokens": 2, "ignore_eos": True}


def test_the_extensions_reach_the_model_on_chat_and_completions(
    sdk: openai.OpenAI, served: tuple[str, FakeBackendPlugin, Any]
) -> None:
    ext = served[1]
    sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=4, extra_body=EXTENSIONS)
    p = last_params(ext)
    assert (p.top_k, p.min_p, p.repetition_penalty, p.min_tokens, p.ignore_eos) == (5, 0.25, 1.3, 2, True)
    sdk.completions.create(model=EXT, prompt="x", max_tokens=4, extra_body=EXTENSIONS)
    p = last_params(ext)
    assert (p.top_k, p.min_p, p.repetition_penalty, p.min_tokens, p.ignore_eos) == (5, 0.25, 1.3, 2, True)
    sdk.completions.create(model=EXT, prompt="x", max_tokens=4)  # unset: off
    p = last_params(ext)
    assert (p.top_k, p.min_p, p.repetition_penalty, p.min_tokens, p.ignore_eos) == (0, 0.0, 1.0, 0, False)


def test_min_tokens_and_ignore_eos_keep_a_completion_going(sdk: openai.OpenAI) -> None:
    # the model ends after 5 tokens unless held back
    assert sdk.completions.create(model=EXT, prompt="x", max_tokens=12).usage.completion_tokens == 5
    held = sdk.completions.create(model=EXT, prompt="x", max_tokens=12, extra_body={"min_tokens": 8})
    assert held.usage.completion_tokens == 8 and held.choices[0].finish_reason == "stop"
    forever = sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=12, extra_body={"ignore_eos": True})
    assert forever.usage.completion_tokens == 12 and forever.choices[0].finish_reason == "length"


def test_a_stop_string_waits_for_min_tokens(sdk: openai.OpenAI) -> None:
    stop = FAKE_SCRIPT[2]  # the third character of the fake's output; it does not occur before
    assert FAKE_SCRIPT.index(stop) == 2
    early = sdk.completions.create(model=PLAIN, prompt="x", max_tokens=20, stop=[stop])
    assert early.choices[0].text == FAKE_SCRIPT[:2]
    later = sdk.completions.create(model=PLAIN, prompt="x", max_tokens=20, stop=[stop], extra_body={"min_tokens": 3})
    text = later.choices[0].text
    assert text.startswith(FAKE_SCRIPT[:3]) and stop not in text[3:]
    assert later.usage.completion_tokens >= 3


BAD_VALUES: list[tuple[str, Any]] = [
    ("top_k", -2),
    ("min_p", -0.1),
    ("min_p", 1.5),
    ("repetition_penalty", 0),
    ("repetition_penalty", -1.0),
    ("repetition_penalty", 1e-300),  # float32 makes it 0: logits / 0
    ("repetition_penalty", 1e300),
    ("min_tokens", -1),
    ("min_tokens", 1.5),
    ("ignore_eos", "yes"),
    ("guided_choice", []),
    ("guided_regex", ""),
    ("guided_json", 3),
]


@pytest.mark.parametrize(("param", "value"), BAD_VALUES)
@pytest.mark.parametrize("route", ["chat", "completions"])
def test_out_of_range_values_are_400_naming_the_parameter(
    sdk: openai.OpenAI, route: str, param: str, value: Any
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        if route == "chat":
            sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=4, extra_body={param: value})
        else:
            sdk.completions.create(model=EXT, prompt="x", max_tokens=4, extra_body={param: value})
    body: Any = info.value.body
    assert (body["param"], body["code"], body["type"]) == (param, "invalid_value", "invalid_request_error"), body


@pytest.mark.parametrize("stream", [False, True])
def test_min_tokens_above_max_tokens_is_400(sdk: openai.OpenAI, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=4, stream=stream, extra_body={"min_tokens": 5})
    assert info.value.body["param"] == "min_tokens"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as info:  # the completions default budget is 16 tokens
        sdk.completions.create(model=EXT, prompt="x", extra_body={"min_tokens": 17})
    assert info.value.body["param"] == "min_tokens"  # type: ignore[index]
    sdk.completions.create(model=EXT, prompt="x", extra_body={"min_tokens": 16})


@pytest.mark.parametrize(("param", "value"), [("min_p", 0.1), ("repetition_penalty", 1.2)])
@pytest.mark.parametrize("stream", [False, True])
def test_a_backend_that_does_not_implement_one_refuses_it(
    sdk: openai.OpenAI, param: str, value: float, stream: bool
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model=PLAIN, messages=USER, max_tokens=4, stream=stream, extra_body={param: value})
    body: Any = info.value.body
    assert (body["param"], body["code"]) == (param, "unsupported_parameter")
    assert PLAIN in body["message"]
    # its neutral value is no use of it
    off = {"min_p": 0.0, "repetition_penalty": 1.0}[param]
    sdk.chat.completions.create(model=PLAIN, messages=USER, max_tokens=2, extra_body={param: off})


GUIDED = {
    "guided_json": {"type": "object"},
    "guided_regex": "[a-z]+",
    "guided_choice": ["yes", "no"],
    "guided_grammar": 'start: "a"',
}


@pytest.mark.parametrize("param", sorted(GUIDED))
def test_guided_fields_are_structured_outputs(sdk: openai.OpenAI, param: str) -> None:
    # the fake takes no part in constrained decoding: the refusal shows the field became
    # a constraint, named by the field the client sent
    with pytest.raises(openai.BadRequestError) as info:
        sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=4, extra_body={param: GUIDED[param]})
    body: Any = info.value.body
    assert (body["param"], body["code"]) == (param, "unsupported_parameter")
    assert "constrained decoding" in body["message"]
    with pytest.raises(openai.BadRequestError) as info:
        sdk.completions.create(model=EXT, prompt="x", max_tokens=4, extra_body={param: GUIDED[param]})
    assert info.value.body["param"] == param  # type: ignore[index]


def test_guided_fields_conflict_with_other_constraints(sdk: openai.OpenAI) -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"guided_regex": "a", "structured_outputs": {"regex": "b"}}, "guided_regex", "structured_outputs"),
        ({"guided_choice": ["a"], "response_format": {"type": "json_object"}}, "guided_choice", "response_format"),
        ({"guided_json": {}, "guided_regex": "a"}, "guided_regex", "guided_json"),
        ({"guided_json": "{not json"}, "guided_json", "not JSON"),
    ]
    for extra, param, mentioned in cases:
        with pytest.raises(openai.BadRequestError) as info:
            sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=4, extra_body=extra)
        body: Any = info.value.body
        assert body["param"] == param and mentioned in body["message"], body


# --- X-FlexServ-Ignored-Fields ---------------------------------------------------------


def test_dropped_fields_are_named_in_a_header(sdk: openai.OpenAI) -> None:
    raw = sdk.chat.completions.with_raw_response.create(
        model=EXT,
        messages=[{"role": "user", "content": "hi", "colour": "red"}],
        max_tokens=2,
        extra_body={"best_of": 2, "guided_decoding_backend": "xgrammar", "top_k": 3},
    )
    listed = raw.headers[HEADER].split(",")
    assert sorted(listed) == ["best_of", "guided_decoding_backend", "messages[0].colour"]
    raw = sdk.completions.with_raw_response.create(
        model=EXT, prompt="x", max_tokens=2, stream=True, extra_body={"use_beam_search": False}
    )
    assert raw.headers[HEADER] == "use_beam_search"
    assert [c for c in raw.parse()]  # the stream itself is whole
    clean = sdk.chat.completions.with_raw_response.create(model=EXT, messages=USER, max_tokens=2)
    assert HEADER not in clean.headers
    with pytest.raises(openai.BadRequestError) as info:  # an error response says so too
        sdk.chat.completions.create(model=EXT, messages=USER, max_tokens=2, extra_body={"min_p": 7, "beam": 1})
    assert info.value.response.headers[HEADER] == "beam"


def test_the_header_is_bounded_and_safe(served: tuple[str, Any, Any]) -> None:
    odd = "sp ace,comma\u00e9\r\nX-Injected: 1"
    body: dict[str, Any] = {"model": EXT, "messages": USER, "max_tokens": 1, odd: 1}
    body.update({f"field_{i:04d}": i for i in range(2000)})
    r = httpx.post(f"{served[0]}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200 and "x-injected" not in r.headers
    value = r.headers[HEADER]
    assert len(value) <= MAX_CHARS and value.isascii()
    items = value.split(",")
    listed, rest = items[:-1], items[-1]
    assert rest.startswith("+") and len(listed) + int(rest[1:]) == 2001
    assert unquote(listed[0]) == odd
    assert listed[1:4] == ["field_0000", "field_0001", "field_0002"]


def test_header_value_edges() -> None:
    assert header_value([]) is None and header_value([[]]) is None
    assert header_value([["a"], ["b[0].c"]]) == "a,b[0].c"
    assert header_value([["a+b", "%"]]) == "a%2Bb,%25"
    assert header_value([["x" * 20]], max_chars=10) == "+1"
    assert header_value([["aaaa", "bbbb", "cccc"]], max_chars=10) == "aaaa,+2"
    assert header_value([["aaaa", "bbbb"]], max_chars=9) == "aaaa,bbbb"
