"""An over-long prompt is refused before the tokenizer runs, and nothing that fits is.

The tiny Llama's byte-level BPE has every byte's symbol and a longest token of 32
bytes: with its context of 64 tokens, a prompt of more than ``63 * 32`` bytes
certainly overflows. :func:`token_bound` itself is checked on small pipelines built
with ``tokenizers``: the normalizers, pre-tokenizers and added tokens that could make
a token stand for more text than its own keep full tokenization."""

from __future__ import annotations

from typing import Any

import pytest
from flexserv_transformers.fast_tokenizer import FastTokenizer
from flexserv_transformers.token_bound import TokenBound, byte_level_symbols, token_bound
from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import BPE

from flexserv_core import ContextLengthExceeded
from flexserv_core.api.text_request import completion_prompts
from flexserv_core.api.text_validation import check_prompt

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
def counted(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> CountingTokenizer:
    counting = CountingTokenizer(tiny.tokenizer)
    monkeypatch.setattr(tiny, "tokenizer", counting)
    return counting


def test_the_tiny_models_bound(tiny: Any) -> None:
    assert (tiny.limits.context_length, tiny.limits.max_token_bytes, tiny.limits.dropped_bytes) == (64, 32, b"")


def test_a_completions_prompt_just_over_the_bound_is_refused_untokenized(tiny: Any, counted: CountingTokenizer) -> None:
    with pytest.raises(ContextLengthExceeded) as refused:
        completion_prompts(tiny, "a" * (BOUND + 1))
    assert refused.value.param == "prompt" and "at least 64 tokens" in refused.value.message
    with pytest.raises(ContextLengthExceeded) as refused:
        completion_prompts(tiny, ["hi", "é" * (BOUND // 2 + 1)])  # bytes, not characters
    assert refused.value.param == "prompt[1]"
    assert counted.calls == [2]  # only "hi"
    completion_prompts(tiny, "a" * BOUND)  # at the bound it is tokenized (and found too long later)
    assert counted.calls[-1] == BOUND


def test_a_chat_prompt_over_the_bound_is_refused_untokenized(tiny: Any, counted: CountingTokenizer) -> None:
    messages = [{"role": "user", "content": "a" * BOUND}]  # the template's text takes it over
    with pytest.raises(ContextLengthExceeded) as refused:
        tiny.render_chat_for_generation(messages, {})
    assert refused.value.param == "messages" and not counted.calls
    # with a client's special-token text held aside, the text is measured as it is tokenized
    with pytest.raises(ContextLengthExceeded):
        tiny.render_chat_for_generation([{"role": "user", "content": "<|im_start|>" + "a" * BOUND}], {})
    assert not counted.calls
    assert len(tiny.render_chat(messages, {})) > 64  # counting (/tokenize) still tokenizes it


def test_a_prompt_of_single_character_tokens_that_fits_is_not_refused(tiny: Any) -> None:
    text = "\x01" * 60
    ((ids, _text),) = completion_prompts(tiny, text)
    assert len(ids) >= 60  # one token per character (and a BOS, if the tokenizer adds one)
    check_prompt(tiny.limits, len(ids), "prompt")
    messages = [{"role": "user", "content": "\x01" * 40}]
    check_prompt(tiny.limits, len(tiny.render_chat_for_generation(messages, {})), "messages")


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
