"""An over-long prompt is refused before the tokenizer runs, and nothing that fits is.

The tiny Llama's byte-level BPE has every byte's symbol and a longest token of 32
bytes: with its context of 64 tokens, a prompt of more than ``63 * 32`` bytes
certainly overflows. :func:`token_bound` itself is checked on small pipelines built
with ``tokenizers``: the normalizers, pre-tokenizers and added tokens that could make
a token stand for more text than its own keep full tokenization."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flexserv_transformers.fast_tokenizer import FastTokenizer
from flexserv_transformers.token_bound import TokenBound, byte_level_symbols, token_bound
from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import BPE

from flexserv_core import TextGenerationModel
from flexserv_core.testing import make_app, running_app_client

BOUND = 63 * 32


class CountingTokenizer:
    """The model's tokenizer, recording the size of every text it is called on."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.calls: list[int] = []

    def __call__(self, text: str, **kwargs: Any) -> Any:
        self.calls.append(len(text))
        return self._tokenizer(text, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


@pytest.fixture
async def served(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[httpx.AsyncClient, Any, CountingTokenizer]]:
    """A client of an app serving the tiny Llama as ``tiny``, the loaded model and its
    tokenizer, counting its calls from then on."""
    app = make_app(["transformers"], settings={"model": [f"tiny={tiny_dir}"], "dtype": "float32"})
    async with running_app_client(app) as client:
        async with app.state.flexserv.registry.acquire("tiny", TextGenerationModel) as lease:
            model = lease.model
        counting = CountingTokenizer(model.tokenizer)
        monkeypatch.setattr(model, "tokenizer", counting)
        yield client, model, counting


def context_exceeded(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded", error
    return str(error["param"])


async def test_the_tiny_models_bound(served: tuple[httpx.AsyncClient, Any, CountingTokenizer]) -> None:
    _client, model, _counting = served
    assert (model.limits.context_length, model.limits.max_token_bytes, model.limits.dropped_bytes) == (64, 32, b"")


async def test_a_prompt_just_over_the_bound_is_refused_untokenized(
    served: tuple[httpx.AsyncClient, Any, CountingTokenizer],
) -> None:
    client, _model, counting = served
    over = "a" * (BOUND + 1)
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": over, "max_tokens": 1})
    assert context_exceeded(r) == "prompt" and "at least 64 tokens" in r.json()["error"]["message"]
    wide = "é" * (BOUND // 2 + 1)  # bytes, not characters
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": ["hi", wide], "max_tokens": 1})
    assert context_exceeded(r) == "prompt[1]"
    assert counting.calls == [2]  # only "hi"
    for content in (over[1:], "<|im_start|>" + over[1:]):  # a client's special-token text, measured as tokenized
        chat = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": 1}
        r = await client.post("/v1/chat/completions", json=chat)
        assert context_exceeded(r) == "messages"
    assert counting.calls == [2]
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": over[1:], "max_tokens": 1})
    assert context_exceeded(r) == "prompt" and counting.calls[-1] == BOUND  # at the bound: tokenized


async def test_a_prompt_of_single_character_tokens_that_fits_is_not_refused(
    served: tuple[httpx.AsyncClient, Any, CountingTokenizer],
) -> None:
    client, _model, _counting = served
    r = await client.post("/v1/completions", json={"model": "tiny", "prompt": "\x01" * 60, "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] >= 60  # one token per character
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "\x01" * 40}], "max_tokens": 1}
    r = await client.post("/v1/chat/completions", json=chat)
    assert r.status_code == 200, r.text


# --- token_bound on small pipelines ---------------------------------------------------


def byte_level(vocab: list[str], **model: Any) -> Tokenizer:
    tokenizer = Tokenizer(BPE({t: i for i, t in enumerate(vocab)}, [], **model))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tokenizer


def bound(tokenizer: Tokenizer) -> TokenBound:
    return token_bound(FastTokenizer(tokenizer, special_tokens={}))


def test_byte_level_bpe_has_a_bound_and_dropped_bytes() -> None:
    symbols = byte_level_symbols()
    assert bound(byte_level([*symbols, "ĠĠĠĠ"])) == TokenBound(4, b"")  # four spaces: 4 bytes
    without_eot = [s for s in symbols if s != symbols[4]]
    assert bound(byte_level(without_eot)) == TokenBound(1, b"\x04")
    assert byte_level(without_eot).encode("a\x04\x04b").tokens == ["a", "b"]  # why it is not counted
    # an unfused unknown token stands for one byte (its own text, counted as 5, is only more)
    assert bound(byte_level([*without_eot, "<unk>"], unk_token="<unk>")) == TokenBound(5, b"")
    assert bound(byte_level([*without_eot, "<unk>"], unk_token="<unk>", fuse_unk=True)) == TokenBound()
    added = byte_level(symbols)
    added.add_special_tokens(["<|a_long_special_token|>"])
    assert bound(added) == TokenBound(24, b"")


@pytest.mark.parametrize(
    "change",
    [
        lambda t: setattr(t, "normalizer", normalizers.NFKC()),  # "ﬁ" (3 bytes) -> "fi" (2)
        lambda t: setattr(t, "normalizer", normalizers.Lowercase()),
        lambda t: setattr(t, "normalizer", normalizers.Replace("  ", " ")),
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Whitespace()),  # drops whitespace
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Split(" ", "removed")),
        lambda t: t.add_special_tokens([AddedToken("<mask>", lstrip=True)]),  # swallows spaces
    ],
    ids=["nfkc", "lowercase", "collapsing-replace", "whitespace", "split-removed", "lstrip"],
)
def test_what_could_shrink_or_swallow_text_keeps_full_tokenization(change: Any) -> None:
    tokenizer = byte_level(byte_level_symbols())
    change(tokenizer)
    assert bound(tokenizer) == TokenBound()


def test_a_growing_replace_and_byte_fallback_keep_a_bound() -> None:
    vocab = ["▁", "a", "▁a", *(f"<0x{b:02X}>" for b in range(256))]
    tokenizer = Tokenizer(BPE({t: i for i, t in enumerate(vocab)}, [], byte_fallback=True))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    assert bound(tokenizer) == TokenBound(6, b"")  # "<0x41>" is counted as its 6 bytes: only more
    missing = Tokenizer(BPE({t: i for i, t in enumerate(vocab[:-1])}, [], byte_fallback=True))
    assert bound(missing) == TokenBound()  # a character without byte tokens would be dropped
