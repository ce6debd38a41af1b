"""An over-long prompt is refused before llama.cpp tokenizes it, and nothing that fits is.

The embedded SmolLM2's longest token decodes to 81 bytes and its byte-level
vocabulary has no symbol for a few control bytes (``\\x04``...), which it drops, so
with a context of 2048 tokens a prompt of more than ``2047 * 81`` counted bytes
certainly overflows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flexserv_llamacpp.token_bound import TokenBound, byte_level_symbols, token_bound

from flexserv_core import ContextLengthExceeded
from flexserv_core.api.text_request import completion_prompts
from flexserv_core.api.text_validation import check_prompt

BOUND = 2047 * 81


@pytest.fixture
def calls(smol: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every text llama.cpp tokenizes during the test."""
    seen: list[int] = []
    tokenize: Callable[..., list[int]] = smol.runtime.tokenize

    def counted(text: str | bytes, **kwargs: Any) -> list[int]:
        seen.append(len(text))
        return tokenize(text, **kwargs)

    monkeypatch.setattr(smol.runtime, "tokenize", counted)
    return seen


def test_the_bound_is_the_longest_piece_and_the_dropped_bytes(smol: Any) -> None:
    assert (smol.limits.context_length, smol.limits.max_token_bytes) == (2048, 81)
    assert b"\x04" in smol.limits.dropped_bytes and b"a" not in smol.limits.dropped_bytes


def test_a_completions_prompt_just_over_the_bound_is_refused_untokenized(smol: Any, calls: list[int]) -> None:
    with pytest.raises(ContextLengthExceeded) as refused:
        completion_prompts(smol, "a" * (BOUND + 1))
    assert refused.value.param == "prompt" and "at least 2048 tokens" in refused.value.message
    with pytest.raises(ContextLengthExceeded) as refused:
        completion_prompts(smol, ["hi", "a" * (BOUND + 1)])
    assert refused.value.param == "prompt[1]"
    assert calls == [2]  # only "hi"
    completion_prompts(smol, "a" * BOUND)  # at the bound it is tokenized (and found too long later)
    assert calls[-1] == BOUND


def test_a_chat_prompt_over_the_bound_is_refused_untokenized(smol: Any, calls: list[int]) -> None:
    messages = [{"role": "user", "content": "a" * BOUND}]  # the template's text takes it over
    with pytest.raises(ContextLengthExceeded) as refused:
        smol.render_chat_for_generation(messages, {})
    assert refused.value.param == "messages" and not calls
    assert len(smol.render_chat(messages, {})) > 2048  # counting (/tokenize) still tokenizes it


def test_long_prompts_that_fit_are_not_refused(smol: Any) -> None:
    # 2000 one-byte tokens, and 200,000 dropped bytes around 2 tokens: far beyond what
    # the bound counts in characters, yet both fit the context
    for text in ("\x01" * 2000, "hi" + "\x04" * 200_000):
        ((ids, _text),) = completion_prompts(smol, text)
        check_prompt(smol.limits, len(ids), "prompt")
        assert len(ids) <= 2001
    messages = [{"role": "user", "content": "\x04" * 200_000}]
    check_prompt(smol.limits, len(smol.render_chat_for_generation(messages, {})), "messages")


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
