"""Each ``TextLimits`` field enforced once, at the API boundary: a 400 naming the
parameter to fix, also when streaming, and nothing reaches the model."""

from __future__ import annotations

from typing import Any

import pytest

from flexserv_core.backends.base import TextLimits
from flexserv_core.testing.fakes import FakeBackendPlugin

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake() -> FakeBackendPlugin:
    """A small context so the limits are easy to reach: 64 tokens, at most 20 per completion."""
    return FakeBackendPlugin(context_length=64, max_max_tokens=20, default_max_tokens=8)


def assert_400(r: Any, param: str, code: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code), error
    return str(error["message"])


def nothing_generated(fake: FakeBackendPlugin) -> bool:
    return all(m.generated_sequences == 0 for m in fake.backend.models)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("path", "body", "param", "code", "message"),
    [
        (CHAT, {"messages": USER, "max_tokens": 21}, "max_tokens", "invalid_value", "at most 20"),
        (CHAT, {"messages": USER, "max_completion_tokens": 21}, "max_completion_tokens", "invalid_value", "at most 20"),
        (COMPLETIONS, {"prompt": "hi", "max_tokens": 21}, "max_tokens", "invalid_value", "at most 20"),
        (CHAT, {"messages": [{"role": "user", "content": "x" * 60}]}, "messages", "context_length_exceeded", "64"),
        (
            CHAT,
            {"messages": [{"role": "user", "content": "x" * 30}], "max_tokens": 20},
            "messages",
            "context_length_exceeded",
            "However, you requested",
        ),
        (COMPLETIONS, {"prompt": "x" * 64}, "prompt", "context_length_exceeded", "the prompt alone takes 64 tokens"),
        (COMPLETIONS, {"prompt": "x" * 50, "max_tokens": 15}, "prompt", "context_length_exceeded", "65 tokens"),
        (COMPLETIONS, {"prompt": ["ok", "x" * 64]}, "prompt[1]", "context_length_exceeded", "prompt[1]"),
        (COMPLETIONS, {"prompt": ""}, "prompt", "invalid_value", "empty"),
        (COMPLETIONS, {"prompt": ["ok", ""]}, "prompt[1]", "invalid_value", "empty"),
        (COMPLETIONS, {"prompt": [[104], []]}, "prompt[1]", "invalid_value", "empty"),
        (COMPLETIONS, {"prompt": [104, 0x110000]}, "prompt[1]", "invalid_value", "[0, 1114112)"),
        (COMPLETIONS, {"prompt": [[104], [-1]]}, "prompt[1][0]", "invalid_value", "[0, 1114112)"),
    ],
)
async def test_each_limit_is_a_400_on_its_param(
    flexserv_client: Any,
    fake: FakeBackendPlugin,
    path: str,
    body: dict[str, Any],
    param: str,
    code: str,
    message: str,
    stream: bool,
) -> None:
    r = await flexserv_client.post(path, json={**body, "stream": stream})
    assert message in assert_400(r, param, code)
    assert nothing_generated(fake)


async def test_at_the_limits_is_accepted(flexserv_client: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x" * 44, "max_tokens": 20})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 20
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x" * 63, "max_tokens": 1})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 1


async def test_token_ids_at_both_ends_of_the_vocabulary_are_accepted(flexserv_client: Any) -> None:
    # 0 and vocab_size - 1 are valid ids (a mutation run found no test pinning the lower bound)
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": [0, 0x10FFFF], "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 2


async def test_default_max_tokens_is_capped_by_what_is_left(flexserv_client: Any, fake: FakeBackendPlugin) -> None:
    r = await flexserv_client.post(CHAT, json={"messages": USER})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8  # default_max_tokens
    r = await flexserv_client.post(COMPLETIONS, json={"prompt": "x" * 60})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4  # the rest of the context
    assert [p.max_tokens for p in fake.backend.models[0].params_log] == [8, 4]


def test_limits_reject_nonsense() -> None:
    with pytest.raises(ValueError, match="context_length"):
        TextLimits(context_length=0)
    with pytest.raises(ValueError, match="max_max_tokens"):
        TextLimits(context_length=8, max_max_tokens=0)
    assert TextLimits(context_length=8).vocab_size is None


# --- the context bound on a text prompt before it is tokenized ----------------------


def test_a_text_beyond_the_token_bound_is_refused_before_tokenizing() -> None:
    from flexserv_core.api.text_validation import check_prompt_text
    from flexserv_core.errors import ContextLengthExceeded

    limits = TextLimits(context_length=10, max_token_bytes=4)
    check_prompt_text(limits, "x" * 36, "prompt")  # 36 bytes may still be 9 tokens: it might fit
    with pytest.raises(ContextLengthExceeded) as refused:
        check_prompt_text(limits, "x" * 37, "prompt[2]")  # at least 10 tokens: never fits
    assert refused.value.param == "prompt[2]" and "at least 10 tokens" in refused.value.message
    # bytes, not characters: 12 three-byte characters are 36 bytes, 13 are 39
    check_prompt_text(limits, "€" * 12, "messages")
    with pytest.raises(ContextLengthExceeded):
        check_prompt_text(limits, "€" * 13, "messages")


def test_dropped_bytes_and_an_unknown_bound_refuse_nothing() -> None:
    from flexserv_core.api.text_validation import check_prompt_text

    # a tokenizer that drops \x04 gives it no token: 36 counted bytes may fit
    check_prompt_text(
        TextLimits(context_length=10, max_token_bytes=4, dropped_bytes=b"\x04"), "x" * 36 + "\x04" * 99, "p"
    )
    check_prompt_text(TextLimits(context_length=10), "x" * 10_000, "prompt")  # no bound: tokenized, as before
