"""An over-long prompt is refused before llama.cpp tokenizes it, and nothing that fits is.

The embedded SmolLM2's longest token decodes to 81 bytes and its byte-level
vocabulary has no symbol for a few control bytes (``\\x04``...), which it drops, so
with a context of 2048 tokens a prompt of more than ``2047 * 81`` counted bytes
certainly overflows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_llamacpp.token_bound import TokenBound, byte_level_symbols, token_bound

from flexserv_core import TextGenerationModel
from flexserv_core.testing import make_app, running_app_client

BOUND = 2047 * 81


@pytest.fixture
async def served(smollm_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """A client of an app serving SmolLM2 as ``smol`` (2048 tokens of context), and
    the loaded model, whose ``tokenized`` lists the size of every text llama.cpp
    tokenizes from then on."""
    settings = {"model": [f"smol={smollm_gguf}"], "llamacpp_context_length": 2048, "llamacpp_threads": 1}
    app = make_app(["llamacpp"], settings=settings)
    async with running_app_client(app) as client:
        async with app.state.flexserv.registry.acquire("smol", TextGenerationModel) as lease:
            model = lease.model
        model.tokenized = []
        tokenize: Callable[..., list[int]] = model.runtime.tokenize

        def counted(text: str | bytes, **kwargs: Any) -> list[int]:
            model.tokenized.append(len(text))
            return tokenize(text, **kwargs)

        monkeypatch.setattr(model.runtime, "tokenize", counted)
        yield client, model


def context_exceeded(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded", error
    return str(error["param"])


async def test_the_bound_is_the_longest_piece_and_the_dropped_bytes(served: tuple[httpx.AsyncClient, Any]) -> None:
    _client, model = served
    assert (model.limits.context_length, model.limits.max_token_bytes) == (2048, 81)
    assert b"\x04" in model.limits.dropped_bytes and b"a" not in model.limits.dropped_bytes


async def test_a_prompt_just_over_the_bound_is_refused_untokenized(served: tuple[httpx.AsyncClient, Any]) -> None:
    client, model = served
    over = "a" * (BOUND + 1)
    r = await client.post("/v1/completions", json={"model": "smol", "prompt": over, "max_tokens": 1})
    assert context_exceeded(r) == "prompt" and "at least 2048 tokens" in r.json()["error"]["message"]
    r = await client.post("/v1/completions", json={"model": "smol", "prompt": ["hi", over], "max_tokens": 1})
    assert context_exceeded(r) == "prompt[1]"
    assert model.tokenized == [2]  # only "hi"
    # the chat template's text takes a message of the bound's size over it
    r = await client.post(
        "/v1/chat/completions", json={"model": "smol", "messages": [{"role": "user", "content": over[1:]}]}
    )
    assert context_exceeded(r) == "messages" and model.tokenized == [2]
    r = await client.post("/v1/completions", json={"model": "smol", "prompt": over[1:], "max_tokens": 1})
    assert context_exceeded(r) == "prompt" and model.tokenized[-1] == BOUND  # at the bound: tokenized


@pytest.mark.slow  # generates from a 2,000-token prompt on the real model: ~9 s
async def test_long_prompts_that_fit_are_not_refused(served: tuple[httpx.AsyncClient, Any]) -> None:
    client, _model = served
    # 2000 one-byte tokens, and 200,000 dropped bytes around 2 tokens: beyond the
    # bound in characters, yet both fit the context
    for prompt in ("\x01" * 2000, "hi" + "\x04" * 200_000):
        r = await client.post("/v1/completions", json={"model": "smol", "prompt": prompt, "max_tokens": 1})
        assert r.status_code == 200, r.text
    chat = {"model": "smol", "messages": [{"role": "user", "content": "\x04" * 200_000}], "max_tokens": 1}
    r = await client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 200, r.text


class FakeVocab:
    """A vocabulary as :func:`token_bound` reads it: ``texts`` by id, a kind, attributes."""

    def __init__(self, kind: int, texts: list[str], attrs: dict[int, int] | None = None) -> None:
        self.vocab_type = kind
        self.texts = texts
        self.n_vocab = len(texts)
        self.attrs = attrs or {}

    def token_attr(self, token: int) -> int:
        return self.attrs.get(token, 4)

    def piece_size(self, token: int) -> int:
        text = self.texts[token]
        if self.vocab_type == 2 and set(text) <= set(byte_level_symbols()):
            return len(text)  # one byte per symbol
        return len(text.replace("▁", " ").encode())

    def token_text(self, token: int) -> str:
        return self.texts[token]

    def tokenize(self, text: str | bytes, *, add_special: bool, parse_special: bool = True) -> list[int]:
        assert text == " "
        return [self.texts.index("Ġ")] if "Ġ" in self.texts else [self.texts.index("▁")]


def test_which_vocabularies_have_a_bound() -> None:
    symbols = byte_level_symbols()
    assert token_bound(FakeVocab(2, [*symbols, "ĠĠĠĠ"])) == TokenBound(4, b"")
    assert token_bound(FakeVocab(2, [s for s in symbols if s != symbols[4]])) == TokenBound(1, b"\x04")
    assert token_bound(FakeVocab(1, ["▁the", "<0x41>"])) == TokenBound(6, b"")  # SPM: "<0x41>" counts 6
    assert token_bound(FakeVocab(2, ["▁", "ab"])) == TokenBound()  # BPE that is not byte-level
    assert token_bound(FakeVocab(3, ["[UNK]", "the"])) == TokenBound()  # WordPiece normalizes
    assert token_bound(FakeVocab(4, ["▁the"])) == TokenBound()  # Unigram too
    assert token_bound(FakeVocab(2, [*symbols, "<mask>"], {256: 1 << 7})) == TokenBound()  # lstrip
